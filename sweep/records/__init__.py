"""The study's records: what a run writes and reads back, and nothing that runs a trial.

Owns the results folder (`store`: trials/<key>/summary.json as the record of each trial, trials.csv, the
lock), the live Optuna mirror of it (`mirror`, read fast by `optuna_reads`), what a trial's record means
for the next run (`resume`), the Slurm-attempt history (`history`) and the kept weights (`weights`).
Imports sweep.spec and sweep.text, never sweep.run or sweep.commands.
"""

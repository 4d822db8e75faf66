"""Analysis of a results folder: MTD, statistics, the papers' figures and tables.

Entry points: `analysis.report.analyze(study_dir)` draws every figure that applies and writes the score
tables (what `sweep analyze` calls, through sweep.commands.analyze); `analysis.load.load_results(study_dir)`
is the results folder as one pandas table, a row per trial, for analyses of your own.

Reads files only (pandas); needs no Ray or Optuna runtime. The MTD formula it uses is the trainer's
(trainer.mtd), so the trainer, the dry run and the analysis compute it the same way.
"""

"""Analysis of a results folder: MTD, statistics, the papers' figures and tables.

Reads files only (pandas); needs no Ray or Optuna runtime. The MTD formula it uses is the trainer's
(trainer.mtd), so the trainer, the dry run and the analysis compute it the same way.
"""

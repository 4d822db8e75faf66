"""Analysis of a results folder: MTD, statistics, the papers' figures and tables.

Reads files only (pandas); needs no Ray or Optuna runtime. Submodules are imported on use so that
`from analysis.mtd import traceable_distance` stays light.
"""

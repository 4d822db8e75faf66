"""SentEval's evaluation, re-implemented: the same numbers as SimCSE's fork of SentEval, computed faster.

Modules, each the owner of its names (import them from the module, this package re-exports nothing):
- `sts`: the seven STS tasks (STS12-16, STS-B, SICK-R), and the STS-B dev split training selects on.
- `sts_average`: what may be called the average (all seven tasks, 2-decimal figures) and the labels of a
  subset's scores.
- `transfer`: the seven transfer tasks' classifier protocols (`evaluate_transfer`), run as independent fits
  in parallel processes; `transfer_data` reads their files and builds the feature matrices; `classifier`
  is SentEval's logistic-regression classifier and its fits.
- `encoder`: the sentence encoder every evaluation uses (pooling, batching, devices); `fast_forward` its
  CPU forward for BERT-family float32 models, the same function with fewer operations.
- `cache`: each distinct sentence encoded once, looked up by the STS and transfer tasks.
- `score_table`: the tables `sweep eval` and a trial's log print.

Importing this package, `sts`, `sts_average`, `transfer_data`, `cache` or `score_table` loads no torch (the
sweep driver and the analysis read them); `encoder`, `fast_forward`, `classifier` and `transfer` do.
"""

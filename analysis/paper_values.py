"""The numbers the papers report (bert-base-uncased, STS Spearman x100), keyed by table.

Transcribed from the papers' tables, which docs/science/ quotes with their sources (simcse.md, mocose.md,
gs-infonce.md, mixcse.md); MoCoSE Table 4 is copied cell by cell from the paper's own table.
Figures overlay these as "paper" markers where a study reproduces the table; tables add the main
results as reference rows. Keys use the same units as the results columns (eta, queue positions,
multiples of the batch size, ...).
"""

from __future__ import annotations

from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, SIMCSE
from trainer.vocabulary import STS_TASKS as TASKS


def _tasks(*values: float) -> dict[str, float]:
    *per_task, avg = values
    return {**dict(zip(TASKS, per_task)), "avg": avg}


# Main results (Table 1 of each paper), bert-base, keyed by the trainer's method name.
MAIN_RESULTS: dict[str, dict[str, float]] = {
    SIMCSE: _tasks(68.40, 82.41, 74.38, 80.91, 78.56, 76.85, 72.23, 76.25),
    MOCOSE: _tasks(71.48, 81.40, 74.47, 83.45, 78.99, 78.68, 72.44, 77.27),
    GS_INFONCE: _tasks(70.12, 82.57, 75.21, 82.89, 80.23, 79.70, 72.70, 77.63),
    MIXCSE: _tasks(71.71, 83.14, 75.49, 83.64, 79.00, 78.48, 72.19, 77.66),
}
MAIN_RESULTS_STD: dict[str, dict[str, float]] = {MIXCSE: {"avg": 0.61}}  # MixCSE: mean ± std of 5 runs

# The score every ablation value below is (MoCoSE Tables 3-9, GS-InfoNCE Table 3, MixCSE Table 3, and the best
# MTD of section 5.7): the seven-task STS average. Figures draw them only beside that score (analysis.figures).
ABLATION_SCORE = "avg"

# MoCoSE ablations: the value is the STS avg of that setting.
# fixed eta, K 512, B 64
MOCOSE_TABLE3_EMA = {0.5: 75.76, 0.8: 75.19, 0.85: 76.49, 0.9: 76.05, 0.95: 76.08, 0.99: 75.12}

MOCOSE_TABLE4_DEPTH = {  # (projection layers P, predictor layers Q)
    (0, 1): 60.46, (0, 2): 62.67, (0, 3): 63.62,
    (1, 1): 76.74, (1, 2): 76.89, (1, 3): 76.24,
    (2, 1): 66.96, (2, 2): 66.29, (2, 3): 61.57,
    (3, 1): 31.51, (3, 2): 43.97, (3, 3): 39.13,
}

MOCOSE_TABLE6A_PREDICTOR_WIDTH = {256: 73.91, 512: 76.07, 768: 77.04, 1024: 77.02, 2048: 77.03}
MOCOSE_TABLE6B_BATCH_SIZE = {32: 73.86, 64: 77.25, 128: 76.78, 256: 76.62}  # fixed K = 512

# Table 7: rows = initial queue size as a fraction of K (0 = "w.o. init", 1 = "init all"), columns = K.
MOCOSE_TABLE7_QUEUE_INIT = {
    (0.0, 128): 76.40, (0.0, 256): 76.19, (0.0, 512): 75.38, (0.0, 1024): 76.63, (0.0, 4096): 50.17,
    (0.25, 128): 75.92, (0.25, 256): 76.34, (0.25, 512): 77.30, (0.25, 1024): 76.20, (0.25, 4096): 50.42,
    (0.5, 128): 76.16, (0.5, 256): 76.39, (0.5, 512): 76.94, (0.5, 1024): 76.57, (0.5, 4096): 38.74,
    (1.0, 128): 76.87, (1.0, 256): 75.81, (1.0, 512): 76.29, (1.0, 1024): 76.45, (1.0, 4096): 45.80,
}

# Table 8: K 1024, K0 128, N 256; slices as canonical labels (see analysis.load.slices_label).
MOCOSE_TABLE8_QUEUE_SLICES = {
    "0-512": 76.10, "256-768": 77.02, "512-1024": 75.71, "0-256+768-1024": 76.18, "all": 76.86,
}
MOCOSE_TABLE8_SETTING = {"queue.size": 1024, "queue.initial_size": 128, "batch_size": 256}

MOCOSE_TABLE9_FGSM_EPS = {0.0: 76.26, 1e-9: 75.61, 5e-9: 76.64, 1e-8: 75.39, 5e-8: 76.62}  # 0 = "none"

# GS-InfoNCE Table 3: M as a multiple of the batch size N = 64 (0x is SimCSE).
GS_TABLE3_GAUSSIAN_M = {0.0: 76.25, 0.5: 76.96, 1.0: 76.90, 2.0: 77.11, 3.0: 77.63, 4.0: 76.81, 8.0: 76.94, 16.0: 75.57}

# MixCSE Table 3: (mean, std) over runs.
MIXCSE_TABLE3_ABLATION = {
    "MixCSE": (77.66, 0.61),
    "single direction": (76.43, 0.11),
    "without stop-gradient": (75.74, 0.87),
}

# Section 5.7: the MTD of the best run (bert-base: eta 0.85, K 512, B 64 -> 6.67 + 8.00).
BEST_MTD = {"bert-base": 14.67, "bert-large": 22.0}

# Every table by name, for lookups by key.
TABLES = {
    "main": MAIN_RESULTS,
    "mocose_table3_ema": MOCOSE_TABLE3_EMA,
    "mocose_table4_depth": MOCOSE_TABLE4_DEPTH,
    "mocose_table6a_predictor_width": MOCOSE_TABLE6A_PREDICTOR_WIDTH,
    "mocose_table6b_batch_size": MOCOSE_TABLE6B_BATCH_SIZE,
    "mocose_table7_queue_init": MOCOSE_TABLE7_QUEUE_INIT,
    "mocose_table8_queue_slices": MOCOSE_TABLE8_QUEUE_SLICES,
    "mocose_table9_fgsm_eps": MOCOSE_TABLE9_FGSM_EPS,
    "gs_table3_gaussian_m": GS_TABLE3_GAUSSIAN_M,
    "mixcse_table3_ablation": MIXCSE_TABLE3_ABLATION,
    "best_mtd": BEST_MTD,
}


def mocose_table3_as_mtd(queue_size: int = 512, batch_size: int = 64) -> dict[float, float]:
    """Table 3 placed on the MTD axis: each fixed eta gives 1/(1-eta) + K/B at the paper's K and B."""
    return {1.0 / (1.0 - eta) + queue_size / batch_size: score for eta, score in MOCOSE_TABLE3_EMA.items()}

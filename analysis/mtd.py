"""The maximum traceable distance for the analysis: the trainer's formula (`trainer.mtd`), re-exported.

The formula, the EMA schedule and the explicit choices under schedules and slices live in one place,
`trainer/mtd.py`, so the trainer, the dry run and the analysis compute d_trace the same way.
"""

from trainer.mtd import (
    ETA_CHOICES,
    K_CHOICES,
    TraceableDistanceMeter,
    config_traceable_distance,
    effective_eta,
    traceable_distance,
)
from trainer.schedules import cosine_eta

__all__ = ["ETA_CHOICES", "K_CHOICES", "TraceableDistanceMeter", "config_traceable_distance", "cosine_eta",
           "effective_eta", "traceable_distance"]

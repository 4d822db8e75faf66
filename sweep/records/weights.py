"""The study key `keep_weights`: which trials keep their saved encoder (trials/<key>/model/).

Unless `keep_weights` is `none`, every trial saves its best-dev encoder and tokenizer. As trials end, the
weights of every ended trial outside the top k COMPLETE trials by the study metric are deleted (k = None:
keep all), and each ended trial's `weights` column in trials.csv says kept, deleted or none. summary.json
stays as the trainer wrote it: a finished trial's files do not change when a better trial ends.

The keeper remembers only the trials whose weights are still on disk (at most k + 1 after each end), so a
trial's end costs O(k log k), not a rescan of the study.

    keeper = WeightKeeper(folder, keep=3, metric="dev_stsb", goal="maximize")
    states = keeper.scan(ended)                  # at resume: {key: summary} of every ended trial
    states = keeper.trial_ended(key, summary)    # later: {key: "kept" | "deleted" | "none", ...}
"""

from __future__ import annotations

import shutil
from typing import Any, Mapping

from sweep.records.store import StudyFolder, weights_state
from trainer.summary import metric_value
from trainer.vocabulary import OK


class WeightKeeper:
    def __init__(self, folder: StudyFolder, keep: int | None, metric: str, goal: str):
        self.folder = folder
        self.keep = keep
        self.metric = metric
        self.sign = -1.0 if goal == "maximize" else 1.0
        # ended trials whose weights are on disk, in the order they ended: key -> (rank value, summary)
        self.on_disk: dict[str, tuple[float | None, dict[str, Any]]] = {}

    def scan(self, ended: dict[str, dict[str, Any]]) -> dict[str, str]:
        """Every ended trial at once ({key: summary}, in trial order): the weights column of each (each trial's
        model folder looked for once)."""
        present = {key for key in ended if self._note(key, ended[key])}
        states = self._prune()
        for key, summary in ended.items():
            if key not in states:
                states[key] = weights_state(self.folder, key, summary, on_disk=key in present)
        return states

    def trial_ended(self, key: str, summary: Mapping[str, Any]) -> dict[str, str]:
        """One trial ended: the weights column of that trial and of any trial whose weights its end deleted."""
        self._note(key, summary)
        states = self._prune()
        states[key] = weights_state(self.folder, key, summary)
        return states

    def _note(self, key: str, summary: Mapping[str, Any]) -> bool:
        """Note the trial's weights when they are on disk; whether they are."""
        if not self.folder.model_dir(key).is_dir():
            return False
        value = metric_value(summary, self.metric) if summary.status == OK else None
        self.on_disk[key] = (value, summary)
        return True

    def _prune(self) -> dict[str, str]:
        """Delete the weights outside the top `keep` (on a tie the trial that ended first stays); their new states."""
        if self.keep is None:
            return {}
        scored = [(value, key) for key, (value, _) in self.on_disk.items() if value is not None]
        scored.sort(key=lambda item: self.sign * item[0])  # stable sort
        keepers = {key for _, key in scored[:self.keep]}
        states = {}
        for key in [k for k in self.on_disk if k not in keepers]:
            _, summary = self.on_disk.pop(key)
            shutil.rmtree(self.folder.model_dir(key), ignore_errors=True)
            states[key] = weights_state(self.folder, key, summary)
        return states

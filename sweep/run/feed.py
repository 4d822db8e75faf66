"""The trial feed: the Tune searcher that hands Tune the study's trials, one job at a time.

Owns: TrialFeed, which gives Tune the ledger's next job (sweep.run.ledger.Ledger.next_job: grid and random, the
plan's trials in order; tpe, an Optuna ask run once per seed) in the form of a Tune trial config
(sweep.run.worker.run_trial). Tune asks the feed for a trial whenever it has room (`max_concurrent_trials`, sized
by sweep.run.ray_session.trial_room); the feed hands out nothing once a stop signal came, and the ledger nothing
once the next trial would pass the study's cost_limit (sweep.run.cost_limit). Also StopOnSignal, the Tune
Stopper that passes a stop signal (sweep.run.stopping.StopSignals) to Tune.
"""

from __future__ import annotations

from typing import Any

from ray import tune
from ray.tune.search import Searcher

from sweep.run.job import TrialJob
from sweep.run.ledger import Ledger
from sweep.run.stopping import StopSignals


class TrialFeed(Searcher):
    """A Tune searcher over the run's ledger.

        feed = TrialFeed(ledger)          # ledger: sweep.run.opening.open_study's
        job = feed.next_job()             # the next trial's sweep.run.job.TrialJob, or None when there is none
        config = feed.suggest(trial_id)   # what Tune asks: job.tune_config(), or Searcher.FINISHED
    """

    def __init__(self, ledger: Ledger, stopping: Any = None):
        super().__init__()
        self.ledger = ledger
        self.stopping = stopping  # sweep.run.stopping.StopSignals: nothing new is handed out once it is requested

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        job = self.next_job()
        return job.tune_config() if job is not None else self.FINISHED

    def has_more(self) -> bool:
        return self.ledger.has_more()

    def next_job(self) -> TrialJob | None:
        """The next trial as the job its worker runs; None when there is none, or when stopping."""
        if self.stopping is not None and self.stopping.requested:
            return None  # stopping: launch nothing new
        return self.ledger.next_job()

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its config into ray/<run>/tuner.pkl for Tuner.restore, which resume does not use;
        # the ledger (open storage, terminal stream) stays out of it.
        return {k: v for k, v in self.__dict__.items() if k not in ("ledger", "stopping")}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass  # the ledger is told by sweep.run.trial_events.TrialEvents

    def save(self, checkpoint_path: str) -> None:
        pass  # resume does not use Tune's restore

    def restore(self, checkpoint_path: str) -> None:
        pass


class StopOnSignal(tune.Stopper):
    """Tune stops every trial (and asks for no new one) once a stop signal arrived."""

    def __init__(self, stop: StopSignals):
        self.stop = stop

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.stop.requested

    def __getstate__(self) -> dict[str, Any]:
        return {}  # Tune pickles its config (see sweep.run.feed.TrialFeed.__getstate__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.stop = StopSignals()

"""The nodes of a Ray cluster as a study sees them: where each trial runs, a lost node's trials run again,
and a study that waits for room says what it waits for.

Owns: NodeWatch, a Tune callback used with `sweep run --address`. It learns each trial's node when the
trial starts (the trial actor's address) or reports, and names it in every message and in the summary of a
trial that fails (resources.host). When a trial's worker dies with its node (SIGKILL, a cut link, a power
cut), Tune runs the trial again from its start as the same trial (FailureConfig, LOST_NODE_RETRIES times);
this prints which node was lost and which trial runs again. An attempt that ended because its node failed
the node check (sweep.run.node_checks.NodeUnfit) does not count against those retries. When trials are pending
and none runs, it says at most once a minute what a trial needs and what the cluster has, instead of
silence (Tune's own warning goes to ray.log).

    watch = NodeWatch(say=progress.say, cpu=1, gpu=0)
    watch.location(trial)        # {"host": ..., "node_ip": ...} of the trial's last known node
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ray import tune
from ray.tune.experiment import Trial  # Tune's trial: its `status` is Ray's word, not a TrialState

from sweep.text import shorten

# Times Tune runs a trial again after its worker was lost (its node died, or the process was killed).
LOST_NODE_RETRIES = 2
# A study whose pending trials no node can take says so at most this often (seconds).
WAITING_NOTE_EVERY_S = 60.0
# ... and first after this long with trials pending and none running (a node may be joining).
WAITING_GRACE_S = 10.0


class NodeWatch(tune.Callback):
    def __init__(self, say: Callable[[str], None], cpu: float, gpu: float):
        self.say = say
        self.cpu, self.gpu = cpu, gpu
        self.places: dict[str, dict[str, Any]] = {}  # Tune trial id -> {"host", "node_ip"}
        self.probes: dict[str, Any] = {}  # Tune trial id -> ObjectRef of the actor's (ip, pid)
        self.hosts: dict[str, str] = {}  # node ip -> host name
        self.idle_since: float | None = None
        self.last_note = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {}  # see sweep.run.feed.TrialFeed.__getstate__

    # ---- where a trial runs ------------------------------------------------------------------------
    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        actor = getattr(trial.temporary_state, "ray_actor", None)
        if actor is not None:
            try:  # runs on the actor before the trial's training starts; the answer outlives the actor
                self.probes[trial.trial_id] = actor.get_current_ip_pid.remote()
            except Exception:
                pass

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        ip = result.get("node_ip")
        if ip:
            self.places[trial.trial_id] = {"host": result.get("hostname") or self._host(ip), "node_ip": ip}

    def location(self, trial: Any) -> dict[str, Any]:
        """The trial's node: {"host": name or None, "node_ip": address or None}."""
        place = self.places.get(trial.trial_id)
        if place is not None:
            return place
        probe = self.probes.get(trial.trial_id)
        if probe is not None:
            import ray

            try:
                ip, _ = ray.get(probe, timeout=2)
                place = {"host": self._host(ip), "node_ip": ip}
                self.places[trial.trial_id] = place
                return place
            except Exception:
                pass
        return {"host": None, "node_ip": None}

    def describe(self, trial: Any) -> str:
        place = self.location(trial)
        if place["node_ip"] is None:
            return "an unknown node"
        return f"{place['host'] or '?'} ({place['node_ip']})"

    def _host(self, ip: str) -> str | None:
        if ip not in self.hosts:
            import ray

            try:
                for node in ray.nodes():
                    self.hosts[node.get("NodeManagerAddress")] = node.get("NodeManagerHostname")
            except Exception:
                pass
        return self.hosts.get(ip)

    # ---- a lost node ---------------------------------------------------------------------------------
    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        from sweep.run.trial_events import trial_error

        key = trial.config.get("key", trial.trial_id)
        error = trial_error(trial)
        if "NodeUnfit" in error:
            trial.max_failures += 1  # the node's fault, not the trial's: this attempt is not a retry
            self.say(f"trial {key}: {error.split('NodeUnfit: ', 1)[-1]}; it is left out, the trial runs on "
                     "another node")
        else:
            used = trial.run_metadata.num_failures
            self.say(f"trial {key}: lost with its node {self.describe(trial)} ({shorten(error, 120)}); it runs "
                     f"again from its start (retry {used} of {trial.max_failures})")
        self.places.pop(trial.trial_id, None)
        self.probes.pop(trial.trial_id, None)

    # ---- waiting for room ------------------------------------------------------------------------------
    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        pending = [t for t in trials if t.status == Trial.PENDING]
        running = [t for t in trials if t.status == Trial.RUNNING]
        now = time.monotonic()
        if not pending or running:
            self.idle_since = None
            return
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < WAITING_GRACE_S or now - self.last_note < WAITING_NOTE_EVERY_S:
            return
        self.last_note = now
        self.say(waiting_note(len(pending), self.cpu, self.gpu))


def waiting_note(pending: int, cpu: float, gpu: float) -> str:
    """One line: what the pending trials need and what the cluster's live nodes have free."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    free = ray.available_resources()
    need = f"{cpu:g} CPU" + (f" and {gpu:g} GPU" if gpu else "")
    have = f"{free.get('CPU', 0.0):g} CPU" + (f" and {free.get('GPU', 0.0):g} GPU" if gpu else "")
    return (f"waiting: {pending} trial(s) pending, each needs {need} on one node; the cluster's {len(alive)} live "
            f"node(s) have {have} free (nodes left out hold theirs): add or restart a node (`ray start --address`) "
            "or stop with Ctrl-C and run the same command later")

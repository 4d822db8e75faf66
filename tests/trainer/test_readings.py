"""trainer.readings: a finished run is named an older reading exactly when today's trainer computes something else
for its stored config, so that the analysis never pools it with the current reading's runs."""

from __future__ import annotations

from trainer.config import RunConfig
from trainer.readings import READING, reading_changes

MIXCSE_SINGLE = "MixCSE_single keeps h'_i's own loss and drops only its mixed negative"
RELEASED_SHUFFLE = ("MoCoSE's released token shuffle permutes every position, [CLS] and pads included, with one "
                    "permutation for the whole batch")


def stored(config: dict, drop: tuple[str, ...] = ()) -> dict:
    """The resolved config a summary.json stores, less the dotted keys `drop` (keys its code did not have yet)."""
    data = RunConfig.from_dict(config).resolved().to_dict()
    for key in drop:
        section, name = key.split(".")
        del data[section][name]
    return data


def test_mixcse_single_of_the_symmetric_reading_is_an_older_reading_and_nothing_else_of_mixcse():
    for method in ("mix", "simcse", "gs"):
        single = {"method": method, "mix": {"enabled": True, "directions": "single"}}
        assert reading_changes(stored(single), 2) == [MIXCSE_SINGLE]
        assert reading_changes(stored(single, drop=("mix.anchors",)), 2) == [MIXCSE_SINGLE]  # read as symmetric
    unchanged = [{"method": "mix"},  # both directions
                 {"method": "mix", "mix": {"directions": "single", "anchors": "one_loss"}},  # h_i's loss alone
                 {"method": "mix", "variant": "released", "mix": {"directions": "single"}},  # the release's layout
                 {"method": "mocose", "mix": {"enabled": True, "directions": "single"}}]  # one loss in MoCoSE
    for config in unchanged:
        assert reading_changes(stored(config), 2) == [], config


def test_the_released_mocose_token_shuffle_is_an_older_reading_and_the_papers_is_not():
    shuffled = {"method": "mocose", "variant": "released", "augment": {"token_shuffle": True}}
    assert reading_changes(stored(shuffled, drop=("released.token_shuffle",)), 2) == [RELEASED_SHUFFLE]
    assert reading_changes(stored(shuffled), 2) == [RELEASED_SHUFFLE]
    unchanged = [{"method": "mocose", "augment": {"token_shuffle": True}},  # the paper reading's per-sentence
                 {"method": "mocose", "variant": "released"},  # no shuffle
                 {"method": "simcse", "variant": "released", "augment": {"token_shuffle": True}}]  # not MoCoSE's
    for config in unchanged:
        assert reading_changes(stored(config, drop=("released.token_shuffle",)), 2) == [], config


def test_a_run_of_the_current_reading_is_never_an_older_one():
    for config in ({"method": "mix", "mix": {"directions": "single"}},
                   {"method": "mocose", "variant": "released", "augment": {"token_shuffle": True}}):
        assert reading_changes(stored(config), READING) == []

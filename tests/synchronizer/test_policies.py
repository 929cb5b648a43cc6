"""The four sync styles as their policies answer, without engines: may the explorer run ahead
(``batches_left_running``), are weights due (``weights_due``), and does a load interrupt
generation (partial rollout). Pure and fast: the explorer that acts on them is in
tests/synchronizer/test_explorer_sync.py."""

from __future__ import annotations

import pytest

from trinity.config.schema import Config
from trinity.synchronizer.policies import (
    SYNC_POLICIES,
    ExplorerDriven,
    Fixed,
    FullyAsync,
    TrainerDriven,
    WeightsDue,
    sync_policy,
)


def policy(style: str, mode: str = "both", interval: int = 2, offset: int = 0, **sync):
    sync = {"sync_style": style, "sync_interval": interval, "sync_offset": offset, "sync_timeout": 60, **sync}
    return sync_policy(Config(mode=mode, synchronizer=sync, explorer={"max_inflight_batches": 3}))


def test_each_sync_style_of_the_config_has_its_policy() -> None:
    assert SYNC_POLICIES == {
        "fixed": Fixed,
        "trainer_driven": TrainerDriven,
        "explorer_driven": ExplorerDriven,
        "fully_async": FullyAsync,
    }
    assert all(type(policy(style)) is cls for style, cls in SYNC_POLICIES.items())


@pytest.mark.parametrize("style", ["fixed", "explorer_driven", "trainer_driven"])
def test_the_batches_of_a_sync_interval_run_together_and_drain_at_its_end(style) -> None:
    interval = policy(style, interval=3)
    assert [interval.batches_left_running(step) for step in (1, 2, 3, 4, 6)] == [None, None, 0, None, 0]
    assert not interval.loads_while_running


def test_fully_async_keeps_max_inflight_batches_running_across_interval_ends() -> None:
    fully = policy("fully_async", interval=3)
    assert [fully.batches_left_running(step) for step in (1, 3, 6)] == [2, 2, 2]  # 3 in flight with the next
    assert fully.loads_while_running


def test_fixed_waits_in_one_run_for_the_version_sync_offset_behind_at_each_interval_end() -> None:
    fixed = policy("fixed", offset=1)
    assert fixed.weights_due(done=1, version=0) is None  # within the interval
    assert fixed.weights_due(done=2, version=0) == WeightsDue(1, 60.0, must_arrive=True)
    assert fixed.weights_due(done=2, version=1) == WeightsDue(2)  # holds step 2 - offset 1: newer, no wait
    apart = policy("fixed", mode="explore", offset=1)  # the trainer runs apart: take what is there
    assert apart.weights_due(done=2, version=0) == WeightsDue(1)


def test_explorer_driven_waits_for_the_next_version_when_ahead_and_may_go_on_without_it() -> None:
    for mode in ("both", "explore"):
        driven = policy("explorer_driven", mode=mode, offset=1)
        assert driven.weights_due(done=3, version=0) is None
        assert driven.weights_due(done=4, version=2) == WeightsDue(3, 60.0)  # ahead by 2: wait for 3
        assert driven.weights_due(done=4, version=3) == WeightsDue(4)  # within the offset: no wait


@pytest.mark.parametrize("style", ["trainer_driven", "fully_async"])
def test_async_styles_look_at_every_step_and_wait_in_one_run_when_more_than_the_offset_ahead(style) -> None:
    ahead = policy(style, offset=1)
    assert ahead.weights_due(done=1, version=0) == WeightsDue(1)  # within the offset, between intervals
    assert ahead.weights_due(done=3, version=1) == WeightsDue(2, 60.0)  # staleness stays bounded
    apart = policy(style, mode="explore", offset=1)
    assert apart.weights_due(done=3, version=1) == WeightsDue(2)  # apart: never waits


def test_only_fully_async_with_partial_rollout_interrupts_generation_at_a_load() -> None:
    assert policy("fully_async", partial_rollout=True).interrupts_generation
    assert not policy("fully_async").interrupts_generation
    for style in ("fixed", "explorer_driven", "trainer_driven"):
        assert not policy(style, partial_rollout=True).interrupts_generation  # the checker refuses it there

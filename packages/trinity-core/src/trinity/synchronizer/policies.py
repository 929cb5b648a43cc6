"""The sync styles (``synchronizer.sync_style``): when the explorer may run ahead, when weights are due.

Each style is a small policy the explorer's ``StepScheduler`` asks before a batch goes in
(``batches_left_running``) and before it takes weights (``weights_due``); the scheduler does
the waiting and loading. Names are Trinity-RFT's (its ``dynamic_by_*`` are the config's aliases).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from trinity.config.schema import Config


@dataclass(frozen=True)
class WeightsDue:
    """A fetch the explorer makes: a version >= ``min_version``, waiting up to ``wait`` seconds.

    ``must_arrive``: a version that does not come in ``wait`` ends the run (``SyncTimeout``);
    else the explorer goes on with the weights it has."""

    min_version: int
    wait: float = 0.0
    must_arrive: bool = False


class SyncPolicy(ABC):
    """One sync style, from ``synchronizer``'s interval, offset and timeout."""

    name: ClassVar[str]
    loads_while_running: ClassVar[bool] = False
    """Weights go into the engines while batches run (else the scheduler drains them first)."""

    def __init__(self, config: Config):
        sync = config.synchronizer
        self.interval = sync.explorer_sync_interval or sync.sync_interval
        self.offset = sync.sync_offset
        self.timeout = float(sync.sync_timeout)
        self.in_one_run = config.in_one_run

    @property
    def interrupts_generation(self) -> bool:
        """Whether a weight load pauses the generations in flight and resumes them with the new
        weights (partial rollout) instead of waiting for them to end."""
        return False

    def batches_left_running(self, submitted: int) -> int | None:
        """May the explorer run ahead? Once step ``submitted`` went in, the batches that may still be
        running before the next goes in (None: any number). At an interval's end: none, as weights
        may move next."""
        return 0 if submitted % self.interval == 0 else None

    @abstractmethod
    def weights_due(self, done: int, version: int) -> WeightsDue | None:
        """Are weights due? After ``done`` steps went in, with the engines at ``version``: the fetch
        to make before the next batch, or None."""

    def _boundary(self, done: int) -> bool:
        return done % self.interval == 0

    def _ahead(self, done: int, version: int) -> bool:
        """More than ``sync_offset`` versions ahead of the trainer."""
        return version < done - self.offset

    def _next_version(self, version: int) -> WeightsDue:
        """The version after the engines', waited for up to ``sync_timeout``: the batches written are
        what the trainer trains next, so it can always come; if not, the explorer goes on."""
        return WeightsDue(version + 1, self.timeout)


class Fixed(SyncPolicy):
    """At each interval's end, the version ``step - sync_offset``, waited for in one run; a newer
    one already published is taken too (a trainer taking several steps per explorer step, as on
    step-wise workflows' experiences, would otherwise train ever staler ones)."""

    name = "fixed"

    def weights_due(self, done: int, version: int) -> WeightsDue | None:
        if not self._boundary(done):
            return None
        if self.in_one_run and self._ahead(done, version):
            return WeightsDue(done - self.offset, self.timeout, must_arrive=True)
        return WeightsDue(version + 1)


class ExplorerDriven(SyncPolicy):
    """At each interval's end, newer weights; more than ``sync_offset`` versions ahead, the explorer
    waits for the next, going on with its own after ``sync_timeout`` (Trinity-RFT's
    dynamic_by_explorer)."""

    name = "explorer_driven"

    def weights_due(self, done: int, version: int) -> WeightsDue | None:
        if not self._boundary(done):
            return None
        return self._next_version(version) if self._ahead(done, version) else WeightsDue(version + 1)


class TrainerDriven(SyncPolicy):
    """Whatever the trainer published, after every step (the batches drain first). In one run,
    more than ``sync_offset`` versions ahead it waits for the next: staleness stays bounded, as
    AReaL's max off-policyness (an explorer that never waited ran ever further ahead and did not
    learn)."""

    name = "trainer_driven"

    def weights_due(self, done: int, version: int) -> WeightsDue | None:
        if self.in_one_run and self._ahead(done, version):
            return self._next_version(version)
        return WeightsDue(version + 1)


class FullyAsync(TrainerDriven):
    """As ``trainer_driven``, with ``max_inflight_batches`` batches running across interval ends and
    the weights loaded between them; with ``synchronizer.partial_rollout`` a load pauses the
    generations in flight, which go on with the new weights."""

    name = "fully_async"
    loads_while_running = True

    def __init__(self, config: Config):
        super().__init__(config)
        self.max_inflight = config.explorer.max_inflight_batches
        self.partial_rollout = config.synchronizer.partial_rollout

    @property
    def interrupts_generation(self) -> bool:
        return self.partial_rollout

    def batches_left_running(self, submitted: int) -> int | None:
        return self.max_inflight - 1


SYNC_POLICIES: dict[str, type[SyncPolicy]] = {
    cls.name: cls for cls in (Fixed, ExplorerDriven, TrainerDriven, FullyAsync)
}


def sync_policy(config: Config) -> SyncPolicy:
    """The policy of ``synchronizer.sync_style``."""
    return SYNC_POLICIES[config.synchronizer.sync_style](config)

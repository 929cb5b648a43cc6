"""Priority functions of the replay buffer (``replay_buffer.priority_fn``, plugin kind ``priority_fn``).

A priority function scores an experience from its ``model_version`` and how often it was read
(``use_count``) when it enters the buffer and each time it comes back after
``reuse_cooldown_time``; the replay buffer reads the highest score first and drops the lowest when
full, and ``None`` means "do not (re)use it". ``linear_decay`` is ``model_version - decay *
use_count``; ``decay_limit_randomization`` adds Gaussian noise of ``sigma`` and stops reusing an
experience read ``use_count_limit`` times (0: no limit).
"""

from __future__ import annotations

import random
from typing import ClassVar

from pydantic import Field, ValidationError

from trinity.config.base import PluginArgs
from trinity.config.schema import ReplayBufferConfig
from trinity.plugins import Kind, resolve


class PriorityFn:
    """Base of priority functions: ``Args`` declares the arguments, ``__call__`` scores."""

    Args: ClassVar[type[PluginArgs]] = PluginArgs

    def __init__(self, args: PluginArgs):
        self.args = args

    def __call__(self, model_version: int, use_count: int) -> float | None:
        raise NotImplementedError


class LinearDecay(PriorityFn):
    class Args(PluginArgs):
        decay: float = Field(2.0, description="Priority lost per read.")

    def __call__(self, model_version: int, use_count: int) -> float | None:
        return model_version - self.args.decay * use_count


class DecayLimitRandomization(PriorityFn):
    class Args(LinearDecay.Args):
        use_count_limit: int = Field(3, ge=0, description="Reads after which an experience retires (0: never).")
        sigma: float = Field(0.0, ge=0, description="Standard deviation of the Gaussian noise added.")
        seed: int | None = Field(None, description="Seed of the noise; unset: a fresh one per process.")

    def __init__(self, args: PluginArgs):
        super().__init__(args)
        self.rng = random.Random(self.args.seed)

    def __call__(self, model_version: int, use_count: int) -> float | None:
        if 0 < self.args.use_count_limit <= use_count:
            return None
        priority = model_version - self.args.decay * use_count
        return priority + self.rng.gauss(0.0, self.args.sigma) if self.args.sigma > 0 else priority


def make_priority_fn(replay: ReplayBufferConfig, buffer: str) -> PriorityFn:
    """The priority function ``replay`` names, with its validated arguments."""
    key = f"{buffer}.replay_buffer"
    cls = resolve(Kind.PRIORITY_FN, replay.priority_fn, config_key=f"{key}.priority_fn")
    try:
        return cls(cls.Args(**replay.priority_fn_args))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{key}.priority_fn_args of {replay.priority_fn!r}: {problems}") from None

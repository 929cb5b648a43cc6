"""Task selectors: which taskset rows the explorer gets, in which order.

A selector maps ``(epoch, position in the epoch)`` to row positions: ``sequential`` (file order),
``shuffle`` (a seeded permutation per epoch), ``random`` (rows drawn with replacement) and the
curriculum selectors ``offline_easy2hard`` and ``difficulty_based``, which learn from the pass rates
the explorer reports for its tasks. The first three are pure functions of the seed and the epoch,
so a taskset resumes from ``(epoch, index)`` alone; the curriculum selectors also save what they
learnt. How each orders its rows: ``docs/data.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from trinity.config.schema import DataSelectorConfig


class Selector:
    """Base: ``select`` row positions; ``update`` (pass rates) and state are optional."""

    def __init__(self, rows: Sequence[dict[str, Any]], config: DataSelectorConfig):
        self.size = len(rows)
        self.config = config
        self.seed = 42 if config.seed is None else config.seed
        self._epoch_order: tuple[int, list[int]] | None = None

    def order(self, epoch: int) -> list[int]:
        """Row positions of a whole epoch (selectors that fix the order per epoch)."""
        return list(range(self.size))

    def select(self, epoch: int, start: int, n: int) -> list[int]:
        """Row positions for positions ``start .. start + n`` of ``epoch``."""
        if self._epoch_order is None or self._epoch_order[0] != epoch:
            self._epoch_order = (epoch, self.order(epoch))
        return self._epoch_order[1][start : start + n]

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        """Observed pass rates of rows (positions); only adaptive selectors use them."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` saved (nothing for order-only selectors)."""

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, *key])


class SequentialSelector(Selector):
    pass


class ShuffleSelector(Selector):
    def order(self, epoch: int) -> list[int]:
        return self._rng(epoch).permutation(self.size).tolist()


class RandomSelector(Selector):
    def order(self, epoch: int) -> list[int]:
        return self._rng(epoch).integers(0, self.size, size=self.size).tolist()


def _features(rows: Sequence[dict[str, Any]], keys: list[str], selector: str) -> list[tuple[float, ...]]:
    if not keys:
        raise ValueError(f"data_selector {selector} needs data_selector.feature_keys (columns to sort by)")
    out = []
    for number, row in enumerate(rows, start=1):
        try:
            out.append(tuple(float(row[key]) for key in keys))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"data_selector {selector}: row {number} has no numeric {keys}: {exc}") from exc
    return out


class OfflineEasy2HardSelector(Selector):
    def __init__(self, rows: Sequence[dict[str, Any]], config: DataSelectorConfig):
        super().__init__(rows, config)
        features = _features(rows, config.feature_keys, "offline_easy2hard")
        sign = -1 if config.kwargs.get("descending", False) else 1
        self._sorted = sorted(range(self.size), key=lambda i: tuple(sign * v for v in features[i]))
        self.observed = _PassRates(self.size)

    def order(self, epoch: int) -> list[int]:
        if epoch == 0 or not self.observed.count.any():
            return self._sorted
        rank = np.empty(self.size)
        rank[self._sorted] = np.arange(self.size)
        ease = np.where(self.observed.count > 0, self.observed.mean, 1 - rank / self.size)
        return sorted(range(self.size), key=lambda i: (-ease[i], rank[i]))

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        self.observed.add(indices, pass_rates)

    def state_dict(self) -> dict[str, Any]:
        """The observed rates, and the order of the epoch being read (rates reported during an epoch
        changes only the next one's order, so a resume must not recompute it)."""
        return {"observed": self.observed.state_dict(), "epoch_order": self._epoch_order}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.observed.load_state_dict(state["observed"])
        self._epoch_order = tuple(state["epoch_order"]) if state.get("epoch_order") else None


class _PassRates:
    """The running mean pass rate of each row, and how many observations it has."""

    def __init__(self, size: int, prior: Sequence[float] | None = None):
        self.mean = np.asarray(prior if prior is not None else [0.0] * size, dtype=np.float64)
        self.count = np.full(size, 0.0 if prior is None else 1.0)  # a prior weighs as one observation

    def add(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        for i, rate in zip(indices, pass_rates, strict=True):
            if not math.isnan(rate):
                self.count[i] += 1
                self.mean[i] += (rate - self.mean[i]) / self.count[i]

    def state_dict(self) -> dict[str, list[float]]:
        return {"mean": self.mean.tolist(), "count": self.count.tolist()}

    def load_state_dict(self, state: dict[str, list[float]]) -> None:
        self.mean = np.asarray(state["mean"], dtype=np.float64)
        self.count = np.asarray(state["count"], dtype=np.float64)


class DifficultyBasedSelector(Selector):
    def __init__(self, rows: Sequence[dict[str, Any]], config: DataSelectorConfig):
        super().__init__(rows, config)
        self.target = float(config.kwargs.get("target", 0.5))
        self.tau = float(config.kwargs.get("tau", 0.1))
        if config.feature_keys:
            prior = [f[0] for f in _features(rows, config.feature_keys[:1], "difficulty_based")]
        else:
            prior = [0.5] * self.size
        self.estimate = _PassRates(self.size, prior)

    def select(self, epoch: int, start: int, n: int) -> list[int]:
        weights = np.exp(-np.abs(self.estimate.mean - self.target) / self.tau)
        n = min(n, self.size)
        return self._rng(epoch, start).choice(self.size, size=n, replace=False, p=weights / weights.sum()).tolist()

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        self.estimate.add(indices, pass_rates)

    def state_dict(self) -> dict[str, Any]:
        state = self.estimate.state_dict()
        return {"estimate": state["mean"], "count": state["count"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.estimate.load_state_dict({"mean": state["estimate"], "count": state["count"]})

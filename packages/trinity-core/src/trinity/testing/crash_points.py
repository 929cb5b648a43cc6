"""Deterministic crash points for the chaos tests: ``TRINITY_CRASH_AT=<point>[:<n>]`` kills the
process (SIGKILL: no cleanup, no flush) the ``n``-th time (default 1) it reaches ``<point>``;
with ``TRINITY_CRASH_SIGNAL=SIGSTOP`` it freezes there instead (a paused VM, a process that
outlives its replacement).

The points sit between the writes of a commit path (``explorer.after_append``,
``trainer.after_rename``, ...), where a crash is least likely to land by chance.
"""

from __future__ import annotations

import os
import signal

CRASH_AT = "TRINITY_CRASH_AT"
CRASH_SIGNAL = "TRINITY_CRASH_SIGNAL"
_reached: dict[str, int] = {}


def crash_point(point: str) -> None:
    """Die here if ``TRINITY_CRASH_AT`` names ``point`` and this is its ``n``-th passage."""
    wanted = os.environ.get(CRASH_AT)
    if not wanted or wanted.split(":")[0] != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if str(_reached[point]) == (wanted.split(":") + ["1"])[1]:
        os.kill(os.getpid(), signal.Signals[os.environ.get(CRASH_SIGNAL, "SIGKILL")])

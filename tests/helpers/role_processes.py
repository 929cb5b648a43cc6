"""The processes of one test's Ray role actors, told apart by a tag in their environment.

A test that kills or waits for the roles of its own ``trinity run`` must not touch those of a
suite running beside it: CI runs the engine suites alongside the main one, and a kill matched by
actor name alone SIGKILLed the engine suite's verl trainer mid-run (CI of 2026-12-01 and -02).
"""

from __future__ import annotations

import os
import re

RUN_TAG = "TRINITY_TEST_RUN"
"""Set in the environment of the process a test starts Ray from: its actors inherit it."""


def role_pids(tag: str, roles: str = "ExplorerRole|TrainerRole") -> list[int]:
    """The role actors (Ray titles them ``ray::<Class>``, ``ray::<Class>.<method>`` while busy)
    whose environment holds ``RUN_TAG=tag``."""
    actor, tagged = re.compile(rb"ray::(%s)\b" % roles.encode()), f"{RUN_TAG}={tag}".encode()
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if actor.match(open(f"/proc/{pid}/cmdline", "rb").read()):
                if tagged in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                    pids.append(int(pid))
        except OSError:  # gone meanwhile
            continue
    return pids

"""Shared values of the monitor tests: one experiment, its two roles, a small config."""

from __future__ import annotations

import socket

import pytest

PROJECT, NAME = "proj", "exp"
CONFIG = {"project": PROJECT, "name": NAME, "algorithm": {"algorithm_type": "grpo", "repeat_times": 4}, "tags": [1, 2]}
ROWS = [{"prompt": "1+1?", "response": "2", "reward": 1.0}, {"prompt": "2+2?", "response": "5", "reward": 0.0}]


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

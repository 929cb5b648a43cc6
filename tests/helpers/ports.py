"""Local TCP ports for tests: one nothing listens on, for a server of the test's own (free) or
for a client that must find nobody there (closed)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A local TCP port nothing listens on (the OS's pick, released again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

import pytest

from helpers.ports import free_port


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on."""
    return free_port()

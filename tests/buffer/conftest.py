"""Fixtures of the buffer tests."""

from __future__ import annotations

import pytest
from buffer_helpers import POSTGRES


@pytest.fixture(autouse=True)
def _postgres_for_postgres_kinds(request):
    """Tests parametrised with a ``postgres*`` kind get the session's server (or skip)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec and str(callspec.params.get("kind", "")).startswith("postgres"):
        POSTGRES["url"] = request.getfixturevalue("postgres_url")

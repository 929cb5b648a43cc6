"""Experiences and buffer configs for the buffer tests."""

from __future__ import annotations

import os
import uuid

import torch

from trinity.common.experience import EID, Experience
from trinity.config.schema import ExperienceBufferConfig


def make_experience(i: int, prompt: int = 4, response: int = 6, model_version: int = 0) -> Experience:
    """Experience ``i``: distinct tokens, logprobs and reward, eid task ``str(i)``."""
    tokens = torch.arange(prompt + response, dtype=torch.long) + i
    return Experience(
        tokens=tokens,
        prompt_length=prompt,
        logprobs=torch.linspace(-1, 0, response) - i,
        reward=float(i),
        eid=EID(batch="b", task=str(i)),
        model_version=model_version,
    )


def rewards(experiences: list[Experience]) -> list[int]:
    return [int(e.reward) for e in experiences]


POSTGRES = {"url": None}
"""The session's PostgreSQL URL, set (by ``conftest.py``) for tests of the ``postgres*`` kinds."""


def buffer_config(kind: str, tmp_path, **overrides) -> ExperienceBufferConfig:
    """A buffer named uniquely per test: ``kind`` is memory | sqlite | jsonl | sql | file, or
    postgres (a queue) | postgres_sql (sql) on the session's PostgreSQL server."""
    storage_type, path = {
        "memory": ("queue", None),
        "sqlite": ("queue", os.path.join(tmp_path, "buffer.db")),
        "jsonl": ("queue", os.path.join(tmp_path, "buffer.jsonl")),
        "sql": ("sql", f"sqlite:///{tmp_path}/sql.db"),
        "file": ("file", str(tmp_path)),
        "postgres": ("queue", POSTGRES["url"]),
        "postgres_sql": ("sql", POSTGRES["url"]),
    }[kind]
    assert path or not kind.startswith("postgres"), "request the postgres_url fixture"
    values = {
        "name": f"buf_{uuid.uuid4().hex[:8]}",
        "storage_type": storage_type,
        "path": path,
        "max_read_timeout": 1.0,
    }
    return ExperienceBufferConfig(**{**values, **overrides})


ALL_KINDS = ["memory", "sqlite", "jsonl", "sql", "file", "postgres", "postgres_sql"]
DURABLE_KINDS = ["sqlite", "jsonl", "sql", "file", "postgres", "postgres_sql"]

"""Errors keep their message and fields when Ray sends them from an actor to the driver."""

from __future__ import annotations

import pickle

import pytest

from trinity.buffer.errors import BadDataError, BufferTimeout
from trinity.common.experience import Task
from trinity.config.load import ConfigError, ConfigIssue
from trinity.plugins import Kind, UnknownPluginError
from trinity_workflows.base import WorkflowError

ERRORS = [
    UnknownPluginError(Kind.ADVANTAGE_FN, "grpoo", ["grpo", "ppo"], "algorithm.advantage_fn"),
    ConfigError([ConfigIssue("buffer.batch_size", "expected int, got str 'x'")], "my.yaml"),
    BufferTimeout("experience_buffer", 3.0),
    BadDataError("tasks.jsonl", 7, "missing prompt key 'question'"),
    WorkflowError(
        "math_workflow", Task(workflow_type="math_workflow", raw={}, taskset_name="gsm8k", index=3), KeyError("x")
    ),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_error_survives_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.__dict__ == error.__dict__

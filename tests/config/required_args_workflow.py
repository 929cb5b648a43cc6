"""A workflow whose ``workflow_args`` has a required key (named by dotted path in the config tests)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from trinity.plugin_api import PluginArgs, Workflow


class RequiredArgs(PluginArgs):
    """``workflow_args`` with a key that has no default."""

    env_url: str = Field(description="the environment's address")
    turns: int = Field(2, ge=1, description="an optional key")


class RequiredArgsWorkflow(Workflow):
    """Never run: only its ``Args`` are checked."""

    Args: ClassVar[type[PluginArgs]] = RequiredArgs

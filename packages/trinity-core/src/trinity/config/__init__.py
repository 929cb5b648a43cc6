"""Configuration: the schema, loading with OmegaConf, and the validation/derivation pass."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from trinity.config.check import check_config
from trinity.config.load import ConfigError, ConfigIssue, IssueCollector, parse_config, read_yaml
from trinity.config.schema import Config


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read, type, validate and derive a config; raises ConfigError listing every problem."""
    issues = IssueCollector()
    config = parse_config(read_yaml(path, overrides), issues)
    check_config(config, issues)
    issues.raise_if_any(str(path))
    return config


def to_yaml(config: Config) -> str:
    """The resolved config as YAML, in schema order."""
    return yaml.safe_dump(dataclasses.asdict(config), sort_keys=False, allow_unicode=True)


__all__ = ["Config", "ConfigError", "ConfigIssue", "load_config", "to_yaml"]

"""Configuration: the schema, loading with OmegaConf, and the validation/derivation pass."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from omegaconf import OmegaConf

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


def load_stage_configs(path: str | Path, overrides: list[str] | None = None) -> list[Config]:
    """One checked config per stage (the config itself when it has no ``stages``).

    A stage's sections are merged over the global ones (what it does not set, it
    inherits); its experiment name is ``<name>/<stage_name>``.
    """
    raw = read_yaml(path, overrides)
    config = load_config(path, overrides)
    if not config.stages:
        return [config]
    base = OmegaConf.masked_copy(raw, [k for k in raw if k != "stages"])
    configs = []
    for stage in config.stages:
        sections = {k: getattr(stage, k) for k in ("algorithm", "buffer", "explorer", "trainer") if getattr(stage, k)}
        merged = OmegaConf.merge(base, sections, {"name": f"{config.name}/{stage.stage_name}"})
        if stage.mode and stage.mode != config.mode:
            merged.mode = stage.mode
            merged.synchronizer.sync_method = None  # derived again for the stage's own mode
        issues = IssueCollector()
        stage_config = check_config(parse_config(merged, issues), issues)
        issues.raise_if_any(f"{path} (stage {stage.stage_name})")
        configs.append(stage_config)
    return configs


def to_yaml(config: Config) -> str:
    """The resolved config as YAML, in schema order."""
    return yaml.safe_dump(dataclasses.asdict(config), sort_keys=False, allow_unicode=True)


__all__ = ["Config", "ConfigError", "ConfigIssue", "load_config", "load_stage_configs", "to_yaml"]

"""Configuration: the schema, loading with OmegaConf, derivation, then the check."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trinity.common.errors import first_line
from trinity.config.check import check_config, importing_dotted_paths
from trinity.config.derive import derive_config
from trinity.config.load import ConfigError, ConfigIssue, IssueCollector, parse_config, read_yaml
from trinity.config.schema import Config


def load_config(
    path: str | Path, overrides: list[str] | None = None, strict: bool = False, run: bool = False
) -> Config:
    """Read, type, validate and derive a config; raises ConfigError listing every problem.

    Warnings (deprecated keys, adjusted values, keys with no effect) are logged once. ``run``
    (a config about to run) makes what only a run refuses an error and imports the dotted paths
    the config names to check their arguments (without it, nothing the config names is
    imported); ``strict`` makes what only a run refuses and the keys with no effect errors.
    """
    with importing_dotted_paths(run):
        config, issues = check_tree(read_yaml(path, overrides))
    issues.raise_if_any(str(path), strict, run)
    issues.emit_warnings()
    return config


def derive_and_check(config: Config, issues: IssueCollector) -> Config:
    """The one pass over a parsed config: fill the derived values, then report every problem."""
    derive_config(config, issues)
    check_config(config, issues)
    return config


def check_tree(raw: DictConfig | dict) -> tuple[Config, IssueCollector]:
    """Type, validate and derive a config tree (a file's or the studio's), raising nothing.

    The one pass behind ``load_config`` and ``trinity config check``: the config (defaults where
    a value was bad) and every error and warning, each under its dotted key.
    """
    issues = IssueCollector()
    if not isinstance(raw, DictConfig):
        try:
            raw = OmegaConf.create(raw)
        except OmegaConfBaseException as exc:
            issues.add("", f"not a config tree: {first_line(exc)}")
            return Config(), issues
    return derive_and_check(parse_config(raw, issues), issues), issues


def load_stage_configs(
    path: str | Path, overrides: list[str] | None = None, strict: bool = False, warn: bool = True, run: bool = False
) -> list[Config]:
    """One checked config per stage (the config itself when it has no ``stages``).

    As in Trinity-RFT, a section a stage gives replaces the global one (its keys left out take
    their defaults, not the global values); sections it does not give are the global ones. Its
    experiment name is ``<name>/<stage_name>``, and each stage keeps its final Hugging Face
    weights (``save_hf_checkpoint: never`` becomes ``last``): the next stage starts from them.
    Every issue of every stage is reported at once, and each warning once (``warn=False``:
    none, for a config loaded again); ``run`` and ``strict`` as in ``load_config``.
    """
    with importing_dotted_paths(run):
        return _stage_configs(read_yaml(path, overrides), str(path), strict, warn, run)


def _stage_configs(raw: DictConfig, source: str, strict: bool, warn: bool, run: bool) -> list[Config]:
    issues = IssueCollector()
    config = derive_and_check(parse_config(raw, issues), issues)
    configs = [config]
    if config.stages and not issues.issues:
        base = OmegaConf.masked_copy(raw, [k for k in raw if k != "stages"])
        configs = []
        for stage in config.stages:
            sections = {
                k: getattr(stage, k)
                for k in ("algorithm", "buffer", "data_processor", "explorer", "trainer")
                if getattr(stage, k)
            }
            merged = base.copy()
            for section, values in {**sections, "name": f"{config.name}/{stage.stage_name}"}.items():
                merged[section] = values
            if OmegaConf.select(merged, "trainer.save_hf_checkpoint") == "never":
                merged.trainer.save_hf_checkpoint = "last"
                issues.warn("trainer.save_hf_checkpoint", "never: each stage keeps its last weights for the next")
            if stage.mode and stage.mode != config.mode:
                merged.mode = stage.mode
                if "synchronizer" in merged and "sync_method" in merged.synchronizer:
                    merged.synchronizer.sync_method = None  # derived again for the stage's own mode
            stage_issues = IssueCollector()
            configs.append(derive_and_check(parse_config(merged, stage_issues), stage_issues))
            issues.merge(stage_issues, f" (in stage {stage.stage_name})")
    issues.raise_if_any(source, strict, run)
    if warn:
        issues.emit_warnings()
    return configs


def to_yaml(config: Config) -> str:
    """The resolved config as YAML, in schema order."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


__all__ = [
    "Config",
    "ConfigError",
    "ConfigIssue",
    "check_tree",
    "derive_and_check",
    "load_config",
    "load_stage_configs",
    "to_yaml",
]

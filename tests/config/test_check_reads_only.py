"""The checker only reads: on every seed config, derived, ``check_config`` assigns no field and
leaves every value as it found it (derivation is ``trinity.config.derive``'s alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.seed_env import set_seed_env
from trinity.config.base import ConfigModel
from trinity.config.check import check_config
from trinity.config.derive import derive_config
from trinity.config.load import IssueCollector, parse_config, read_yaml

SEEDS = sorted((Path(__file__).parent / "seeds").glob("*.yaml"))


@pytest.mark.parametrize("mode", ["both", "train", "explore", "bench"])
def test_the_checker_writes_nothing_to_a_derived_config(monkeypatch, tmp_path, mode):
    set_seed_env(monkeypatch, tmp_path)
    writes: list[str] = []
    setattr_ = ConfigModel.__setattr__

    def recording(self: ConfigModel, name: str, value: object) -> None:
        writes.append(f"{type(self).__name__}.{name}")
        setattr_(self, name, value)

    for seed in SEEDS:
        issues = IssueCollector()
        config = parse_config(read_yaml(seed, [f"mode={mode}"]), issues)
        derive_config(config, issues)
        derived = config.model_dump()
        with monkeypatch.context() as patch:
            patch.setattr(ConfigModel, "__setattr__", recording)
            writes.clear()
            check_config(config, issues)
        assert config.model_dump() == derived, f"{seed.name} (mode {mode}): the checker changed a value"
        assert not writes, f"{seed.name} (mode {mode}): the checker assigned {sorted(set(writes))}"
    assert len(SEEDS) >= 9

"""Where a run's job folder goes: under ``./checkpoints`` by default, where the config says otherwise."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from config_helpers import BASE

from trinity.config import load_config

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = BASE.replace("project: demo\nname: run\ncheckpoint_root_dir: {root}\n", "")


@pytest.mark.parametrize(
    ("setting", "job_dir"),
    [
        ("", "checkpoints/Trinity-RFT/rft"),  # the default
        ("checkpoint_root_dir: ''\n", "Trinity-RFT/rft"),  # Trinity-RFT's meaning of "": the working directory
        ("checkpoint_root_dir: out\n", "out/Trinity-RFT/rft"),
        ("checkpoint_root_dir: ./checkpoints\nproject: p\ngroup: g\nname: n\n", "checkpoints/p/g/n"),
    ],
)
def test_the_job_folder_is_under_checkpoints_unless_the_config_names_a_root(tmp_path, monkeypatch, setting, job_dir):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(DEFAULTS.format() + setting)
    assert "checkpoint_root_dir" not in DEFAULTS and "project" not in DEFAULTS
    assert load_config(tmp_path / "config.yaml").checkpoint_job_dir == str(tmp_path / job_dir)


def test_the_default_root_is_ignored_by_git():
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "checkpoints/Trinity-RFT/rft/x"])
    assert ignored.returncode == 0

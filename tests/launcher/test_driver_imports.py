"""``trinity run``'s driver checks the config and starts the roles without importing torch or
transformers: they cost it about 1.4 s of CPU beside Ray's start-up, and only the actors
compute (see ``trinity.common.lazy_import``). A single-process run imports them in the driver
anyway (its roles are threads there), so the quickstart is checked as a run on Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "quickstart.yaml"

DRIVER = """
import json, sys
from trinity.config import load_stage_configs
from trinity.explorer.explorer import Explorer
from trinity.plugins import Kind, resolve
from trinity.trainer.trainer import Trainer

stages = load_stage_configs(sys.argv[1], ["cluster.single_process=false"])
for config in stages:
    resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)
checked = [(c.algorithm.algorithm_type, c.algorithm.policy_loss_fn_args) for c in stages]
print(json.dumps({"checked": checked, "heavy": [m for m in ("torch", "transformers") if m in sys.modules]}))
"""


def test_checking_the_quickstart_and_loading_the_roles_imports_no_torch():
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(QUICKSTART)], capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert [algorithm for algorithm, _ in report["checked"]] == ["sft", "grpo"]  # both stages checked
    assert report["checked"][1][1]["clip_range"] == 0.2  # the default, read from the policy loss class
    assert report["heavy"] == []

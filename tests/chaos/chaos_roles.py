"""The roles of the chaos tests as processes of their own, killed and restarted at will.

Explorer and trainer run as in ``mode: explore`` / ``mode: train``, without Ray: the role
classes themselves on the experiment's sqlite buffer and checkpoint sync. They start from a
forkserver that has imported them once, so a restart costs the role's own start-up only.
A role that fails writes its error to ``<result>`` and exits 1.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import traceback
from multiprocessing.process import BaseProcess
from pathlib import Path

from trinity.testing.crash_points import CRASH_AT, CRASH_SIGNAL

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(  # installed modules only: Python 3.11's forkserver ignores sys.path
    [
        "torch",
        "transformers.models.qwen2.modeling_qwen2",
        "trinity.training.torch_trainer",
        "trinity.rollout.transformers_rollout",
        "trinity.explorer.explorer",
        "trinity.trainer.trainer",
        "trinity.buffer.storage.sql",
        "trinity_workflows.workflows",
        "trinity_workflows.rewards",
    ]
)


def _run(role: str, config_path: str, crash_at: str | None, crash_signal: str, result: str) -> None:
    os.environ.pop(CRASH_AT, None)
    if crash_at:
        os.environ.update({CRASH_AT: crash_at, CRASH_SIGNAL: crash_signal})
    from trinity.config import load_config

    config = load_config(config_path)
    try:
        if role == "explorer":
            from trinity.explorer.explorer import Explorer

            worker = Explorer(config, threads=1)
        else:
            from trinity.trainer.trainer import Trainer

            worker = Trainer(config, threads=1)
        summary = worker.run()
        worker.shutdown()
    except Exception as exc:
        Path(result).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}))
        os._exit(1)
    Path(result).write_text(json.dumps({"summary": summary}))


def start_role(
    role: str, config_path: Path, crash_at: str | None, result: Path, crash_signal: str = "SIGKILL"
) -> BaseProcess:
    """``role`` (explorer | trainer) of the experiment at ``config_path``, started now; it
    gets ``crash_signal`` at the crash point ``crash_at``."""
    result.unlink(missing_ok=True)
    args = (role, str(config_path), crash_at, crash_signal, str(result))
    process = _CONTEXT.Process(target=_run, args=args, daemon=True)
    process.start()
    return process

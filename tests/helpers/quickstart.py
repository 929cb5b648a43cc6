"""The quickstart's experiment as the end-to-end tests, the learning cells and the benchmarks
start from it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"


def quickstart_config(root: Path, model: Path, data: Path, *changes: str, stages: bool = False) -> DictConfig:
    """examples/quickstart/quickstart.yaml writing under ``root/ckpt``, on ``model`` and the
    tasks under ``data``, with ``changes`` (a dotlist) over it. Without ``stages`` it is the GRPO
    stage alone and trains at its lr from the first step (no warm-up): a test's or a cell's few
    steps are tuned so, and their start models do not collapse. It also runs on Ray
    (``cluster.single_process`` off), which most tests' changes need (vLLM, verl, roles in
    processes of their own); ``tests/e2e/test_single_process.py`` runs the shipped setting."""
    config = OmegaConf.load(QUICKSTART / "quickstart.yaml")
    if not stages:
        del config["stages"]
        config.algorithm.optimizer.lr_warmup_steps = 0
        config.cluster.single_process = False
    config.merge_with_dotlist(
        [
            f"checkpoint_root_dir={root / 'ckpt'}",
            f"model.model_path={model}",
            f"buffer.explorer_input.taskset.path={data / 'tasks.jsonl'}",
            *changes,
        ]
    )
    if stages:
        config.stages[0].buffer.trainer_input.experience_buffer.path = str(data / "sft.jsonl")
    return config

"""Multimodal end to end: ``trinity run`` (explorer + trainer) trains the tiny Qwen2-VL model with
``simple_mm_workflow`` on generated shape images; each experience the trainer read carries the
pixels of its own row's image (bad rows: tests/workflows/test_simple_mm_workflow.py)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import torch
import yaml
from e2e_helpers import trinity_run
from PIL import Image
from test_run import assert_ok, metrics
from transformers import AutoConfig, AutoImageProcessor

from helpers.mm_tasks import write_taskset
from trinity.buffer.serialization import deserialize_experience

JOB = Path("ckpt") / "mm" / "shapes"


def mm_experiment(tmp_path: Path, model: Path, data: Path, workflow: str = "simple_mm_workflow") -> Path:
    config = {
        "project": "mm",
        "name": "shapes",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "mode": "both",
        "model": {"model_path": str(model), "max_prompt_tokens": 64, "max_response_tokens": 4},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {
            "batch_size": 2,
            "total_steps": 2,
            "explorer_input": {
                "taskset": {
                    "name": "shapes",
                    "storage_type": "file",
                    "path": str(data),
                    "format": {"prompt_key": "question", "response_key": "answer", "image_key": "image"},
                },
                "default_workflow_type": workflow,
                "default_reward_fn_type": "accuracy_reward",
            },
            "trainer_input": {
                "experience_buffer": {"name": "exp", "storage_type": "queue", "path": str(tmp_path / "exp.db")}
            },
        },
        "explorer": {"eval_on_startup": False, "rollout_model": {"engine_type": "transformers"}},
        "synchronizer": {"sync_interval": 1},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "console"},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def pixel_values(processor, path: str) -> torch.Tensor:
    return processor(images=[Image.open(path).convert("RGB")], return_tensors="pt")["pixel_values"]


def test_simple_mm_workflow_run_trains_on_each_rows_pixels(tmp_path: Path, tiny_vl_model_dir: Path) -> None:
    data = write_taskset(tmp_path / "shapes", 4)
    assert_ok(trinity_run(mm_experiment(tmp_path, tiny_vl_model_dir, data, "async_simple_mm_workflow")))
    assert [r["step"] for r in metrics(tmp_path, "trainer", JOB)] == [1, 2]
    with contextlib.closing(sqlite3.connect(tmp_path / "exp.db")) as db:
        experiences = [deserialize_experience(blob) for (blob,) in db.execute("SELECT data FROM exp_exp")]
    assert len(experiences) == 8
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    processor = AutoImageProcessor.from_pretrained(tiny_vl_model_dir)
    image_token = AutoConfig.from_pretrained(tiny_vl_model_dir).image_token_id
    for exp in experiences:
        user = exp.messages[-2]["content"]
        assert user[0] == {"type": "image"} and user[1]["type"] == "text", user
        pixels = exp.multi_modal_inputs["pixel_values"]  # those of a row asking this question
        asking = [r for r in rows if r["question"] == user[1]["text"]]
        assert any(torch.equal(pixels, pixel_values(processor, r["image"])) for r in asking), user
        assert exp.multi_modal_inputs["image_grid_thw"].tolist() == [[1, 4, 4]]  # 56 pixels: 4x4 patches of 14
        assert int((exp.prompt_tokens == image_token).sum()) == 4  # one token per merged 2x2 patch

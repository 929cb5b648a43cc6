"""Every algorithm type trains three steps end to end on the tiny model, on a CPU.

One Ray for the whole module; each type is one ``trinity.launcher.run`` in this process: the
explorer (transformers engine) and the trainer (torch engine) as Ray actors, the experience
queue and the weight store between them, as ``trinity run`` does it. Types that need other data
get small generated sets: SFT, DPO and CPT files, expert data for ``mix``, a teacher model for
distillation, follow-up turns for the multi-step types, a greedy baseline for ``remax``.
Rewards come from ``length_parity_reward`` (tests/e2e/algorithm_plugins), which varies within a
task even for an untrained model, so that every type has a learning signal.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from e2e_helpers import write_experiment

from trinity.monitor.console import read_jsonl
from trinity.plugins import Kind, get_registry
from trinity.plugins import manager as plugin_manager

PLUGINS = Path(__file__).with_name("algorithm_plugins")
JOB = Path("ckpt") / "quickstart" / "arithmetic"
STEPS = 3
FORMAT = "{prompt_type: plaintext, prompt_key: question, response_key: answer}"
DAPO_PIPELINE = (
    "data_processor.experience_pipeline.operators=[{name: dapo_dynamic_sampling},"
    " {name: overlong_reward_shaping, args: {max_response_length: 4, cache_length: 2}}]"
)
"""DAPO's experience side: groups all right or all wrong dropped and refilled; overlong shaping."""


@pytest.fixture(scope="module")
def algorithm_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("algorithm_data")
    sums = [(a, b) for a in range(5) for b in range(5)]
    rows = {
        "tasks": [{"question": f"{a}+{b}=", "answer": str(a + b), "turns": ["Add one to it."]} for a, b in sums],
        "sft": [{"question": f"{a}+{b}=", "answer": str(a + b)} for a, b in sums],
        "dpo": [{"question": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)} for a, b in sums],
        "cpt": [{"text": f"{a} plus {b} is {a + b}."} for a, b in sums],
    }
    for name, content in rows.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in content))
    return out


@pytest.fixture(scope="module")
def ray_with_plugins():
    """A Ray whose workers (and this process's registry) load the test plugins: the workers
    inherit the variable from this process, as a ``runtime_env`` would give it them at about
    0.7 s more CPU per actor (Ray starts each through its setup_worker)."""
    import ray

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRINITY_PLUGIN_DIRS", str(PLUGINS))
        patch.setattr(plugin_manager, "_registry", None)  # rebuilt with the plugin directory
        if ray.is_initialized():
            ray.shutdown()
        ray.init(include_dashboard=False)
        try:
            yield
        finally:
            ray.shutdown()


def supervised(path: Path, fmt: str) -> list[str]:
    """Mode train on a dataset file (SFT, DPO, CPT rows)."""
    buffer = "{name: data, storage_type: file, path: %s, format: %s}" % (path, fmt)  # noqa: UP031 (YAML braces)
    return ["mode=train", f"buffer.trainer_input.experience_buffer={buffer}", "buffer.train_batch_size=4"]


def overrides(name: str, data: Path, model: Path) -> list[str]:
    """What a type needs beyond the quickstart run."""
    expert = "{sft_dataset: {name: sft_dataset, storage_type: file, path: %s, format: %s}}" % (  # noqa: UP031
        data / "sft.jsonl",
        FORMAT,
    )
    teacher = f"[{{model_path: {model}, engine_type: transformers}}]"
    steps_workflow = ["buffer.explorer_input.default_workflow_type=step_wise_workflow", "explorer.max_timeout=120"]
    return {
        "sft": supervised(data / "sft.jsonl", FORMAT),
        "dpo": supervised(data / "dpo.jsonl", "{prompt_type: plaintext, prompt_key: question}"),
        "cpt": supervised(data / "cpt.jsonl", "{prompt_type: plaintext, prompt_key: text}"),
        "mix": [f"buffer.trainer_input.auxiliary_buffers={expert}"],
        "mix_chord": [f"buffer.trainer_input.auxiliary_buffers={expert}", "algorithm.policy_loss_fn_args.mu_warmup_steps=2"],
        "on_policy_distill": [f"explorer.auxiliary_models={teacher}",
                              "buffer.explorer_input.default_workflow_type=on_policy_distill_workflow"],
        "jsd": [f"explorer.auxiliary_models={teacher}",
                "buffer.explorer_input.default_workflow_type=on_policy_distill_workflow"],
        "multi_step_grpo": steps_workflow,
        "gigpo": steps_workflow,
        "remax": ["buffer.explorer_input.default_workflow_type=greedy_baseline_workflow"],
        "dapo": ["algorithm.policy_loss_fn_args={clip_range_low: 0.2, clip_range_high: 0.28}", DAPO_PIPELINE],
    }.get(name, [])  # fmt: skip


@pytest.mark.parametrize("name", sorted(get_registry().names(Kind.ALGORITHM_TYPE)))
def test_algorithm_type_trains_three_steps(name, tmp_path, tiny_model_dir, algorithm_data, ray_with_plugins):
    from trinity.launcher import run

    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        algorithm_data,
        f"algorithm.algorithm_type={name}",
        "algorithm.repeat_times=2",
        "buffer.batch_size=2",
        f"buffer.total_steps={STEPS}",
        "buffer.explorer_input.default_reward_fn_type=length_parity_reward",
        "model.max_response_tokens=4",
        "trainer.save_interval=0",
        *overrides(name, algorithm_data, tiny_model_dir),
    )
    (summary,) = run(str(config))
    trainer = read_jsonl(tmp_path / JOB / "monitor" / "trainer.jsonl")
    assert [record["step"] for record in trainer] == list(range(1, STEPS + 1)), summary
    for record in trainer:
        assert all(math.isfinite(v) for v in record.values() if isinstance(v, float)), record
        assert any(key in record for key in ("actor/pg_loss", "actor/sft_loss", "actor/dpo_loss")), record
    assert any(record["actor/grad_norm"] > 0 for record in trainer), "no step had a gradient"
    if summary["mode"] == "both":
        explorer = read_jsonl(tmp_path / JOB / "monitor" / "explorer.jsonl")
        assert [record["step"] for record in explorer][:STEPS] == list(range(1, STEPS + 1))
    if name == "dapo":  # dynamic sampling refilled every step to its 2 tasks x 2 rollouts
        assert [record["experience_count"] for record in trainer] == [4.0] * STEPS
        assert all("pipeline/dapo_dynamic_sampling/filtered_count" in record for record in explorer[:STEPS])
    weights = tmp_path / JOB / f"global_step_{STEPS}" / "actor" / "huggingface"
    assert any(weights.glob("*.safetensors")) and os.path.getsize(next(weights.glob("*.safetensors"))) > 0

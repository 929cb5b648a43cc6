"""What ``trinity config check`` warns about and ``trinity run`` refuses, with the same message.

Rules stricter than Trinity-RFT (a taskset without a path, an auxiliary model whose prompt and
response exceed its max_model_len) and the hosted Tinker backend: Trinity-RFT's templates and
examples must still check, and a run must not start on them.
"""

from __future__ import annotations

import pytest
from config_helpers import issues_of, write

from trinity.config import ConfigError, load_config, load_stage_configs
from trinity.config.check import TINKER_REFUSAL
from trinity.launcher import run

AUXILIARY = (
    "explorer.auxiliary_models=[{model_path: /models/judge, engine_type: transformers, "
    "max_model_len: 80, max_prompt_tokens: 64, max_response_tokens: 32}]"
)
EMPTY_PATH = "buffer.explorer_input.taskset.path=''"


def _warned_then_refused(path, overrides: list[str], caplog) -> dict[str, str]:
    """The config checks (each refusal logged as a warning); loading it to run raises the same messages."""
    load_config(path, overrides)
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides, run=True)
    found = {issue.path: issue.message for issue in err.value.issues}
    for key, message in found.items():
        assert f"{key}: {message} (trinity run refuses it)" in caplog.text
    return found


def test_a_taskset_without_path_checks_with_a_warning_and_does_not_run(tmp_path, caplog):
    found = _warned_then_refused(write(tmp_path), [EMPTY_PATH], caplog)
    assert found == {
        "buffer.explorer_input.taskset.path": "required: the file, folder or dataset of the tasks (or a task_dir)"
    }
    with pytest.raises(ConfigError) as err:  # the run command's own door, before Ray starts
        run(str(write(tmp_path)), [EMPTY_PATH])
    assert [issue.path for issue in err.value.issues] == ["buffer.explorer_input.taskset.path"]
    assert issues_of(write(tmp_path), [EMPTY_PATH], strict=True)  # --strict: as the run


def test_an_auxiliary_model_over_its_max_model_len_checks_with_a_warning_and_does_not_run(tmp_path, caplog):
    found = _warned_then_refused(write(tmp_path), [AUXILIARY], caplog)
    assert found == {
        "explorer.auxiliary_models[0].max_model_len": (
            "max_prompt_tokens 64 + max_response_tokens 32 = 96 exceeds max_model_len 80"
        )
    }
    # the rollout model's own limits stay an error at check (Trinity-RFT refuses them too)
    assert "model.max_model_len" in issues_of(write(tmp_path), ["model.max_model_len=80"])


def test_a_stage_refusal_is_refused_at_run_too(tmp_path):
    stages = "stages: [{stage_name: one, buffer: {explorer_input: {taskset: {path: '', default_workflow_type: math_workflow}}}}]\n"
    path = write(tmp_path, stages)
    assert len(load_stage_configs(path, warn=False)) == 1
    with pytest.raises(ConfigError, match=r"taskset.path: required.*\(in stage one\)"):
        load_stage_configs(path, run=True)


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (["model.tinker.enable=true"], ["model.tinker.enable"]),
        (
            ["model.tinker.server_loss_fn=ppo", "model.tinker.forward_backward_chunk_bytes=4000000"],
            ["model.tinker.forward_backward_chunk_bytes", "model.tinker.server_loss_fn"],
        ),
        (
            ["explorer.rollout_model.engine_type=tinker", "trainer.trainer_type=tinker"],
            ["explorer.rollout_model.engine_type", "trainer.trainer_type"],
        ),
    ],
    ids=["enable", "fork-keys", "engine-types"],
)
def test_tinker_is_known_and_refused_at_run_naming_the_hosted_service(tmp_path, caplog, overrides, keys):
    found = _warned_then_refused(write(tmp_path), overrides, caplog)
    assert sorted(found) == keys
    assert all(TINKER_REFUSAL in message and "unknown" not in message for message in found.values())
    assert "hosted Tinker service" in TINKER_REFUSAL


def test_tinker_enable_turns_every_engine_into_tinker_as_trinity_rft(tmp_path):
    cfg = load_config(write(tmp_path), ["model.tinker.enable=true", "model.tinker.base_model=Qwen/Qwen3-4B"])
    assert cfg.trainer.trainer_type == cfg.explorer.rollout_model.engine_type == "tinker"
    assert cfg.model.tinker.base_model == "Qwen/Qwen3-4B"


def test_use_v1_false_is_refused_at_run_vllm_has_no_v0(tmp_path, caplog):
    found = _warned_then_refused(write(tmp_path), ["explorer.rollout_model.use_v1=false"], caplog)
    assert found == {
        "explorer.rollout_model.use_v1": "vLLM removed its V0 engine in 0.11: trinity runs V1 (use_v1: true)"
    }


def test_rope_overrides_are_refused_at_run_with_the_verl_trainer(tmp_path, caplog):
    found = _warned_then_refused(write(tmp_path), ["trainer.trainer_type=verl", "model.rope_theta=100"], caplog)
    assert found == {
        "model.rope_theta": "not passed to verl (its override_config cannot set transformers' rope_parameters): "
        "use trainer_type torch, or leave the model's own RoPE"
    }
    load_config(write(tmp_path), ["model.rope_theta=100"], run=True)  # the torch trainer takes it


def test_a_trainer_estimated_over_a_gpu_checks_with_a_warning_and_does_not_run(
    tmp_path, tiny_model_dir, monkeypatch, caplog
):
    """Trinity-RFT's GPU memory validator. The GPU is a stand-in (its memory, none on the test
    machine); the model's shape is the tiny model's, counted on the meta device."""
    from transformers import AutoModelForCausalLM

    from trinity.config import memory

    shape = memory.model_shape(str(tiny_model_dir))
    assert shape.params == sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters())
    path, overrides = write(tmp_path), [f"model.model_path={tiny_model_dir}", "cluster.gpu_per_node=2"]
    peak = memory.trainer_peak_bytes(load_config(path, overrides), shape)
    monkeypatch.setattr(memory, "device_memory", lambda: int(peak / 0.8) - 1)  # the trainer needs just over 80%
    found = _warned_then_refused(path, overrides, caplog)
    assert list(found) == ["ignore_validator_suggestions"]
    assert "lower trainer.max_token_len_per_gpu" in found["ignore_validator_suggestions"]
    load_config(path, [*overrides, "ignore_validator_suggestions=true"], run=True)  # the user's choice
    load_config(path, [*overrides, "trainer.optimizer_offload=true"], run=True)  # a suggestion taken: it fits
    monkeypatch.setattr(memory, "device_memory", lambda: int(peak / 0.8) + 1)
    load_config(path, overrides, run=True)
    monkeypatch.setattr(memory, "device_memory", lambda: 1)
    load_config(path, [f"model.model_path={tiny_model_dir}", "cluster.gpu_per_node=0"], run=True)  # a CPU trainer

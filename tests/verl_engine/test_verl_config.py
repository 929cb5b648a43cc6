"""The seed's two veRL examples (align_with_verl.md) converted into verl configs, each field
asserted against the comment the seed writes next to it.

``trinity_fields`` (the mapping of trinity fields) is pure Python and runs everywhere; the
merge over verl's own defaults needs verl installed and is skipped without it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from trinity.config import ConfigError, load_config
from trinity_verl.config import trinity_fields, verl_config

SEEDS = Path(__file__).parents[1] / "config" / "seeds"
HOME = "/home/someone"

# verl key -> value, from the seed's comments on the trinity fields that map to it.
GRPO_MAPPED = {
    "algorithm.adv_estimator": "grpo",  # algorithm.adv_estimator=grpo
    "algorithm.use_kl_in_reward": False,  # algorithm.use_kl_in_reward=False
    "actor_rollout_ref.rollout.n": 8,  # actor_rollout_ref.rollout.n=8
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.model.path": "deepseek-ai/deepseek-llm-7b-chat",
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "data.filter_overlong_prompts": True,
    "data.train_batch_size": 1024,  # sync_interval 4 x batch_size 256
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
    "trainer.total_epochs": 15,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,  # buffer.batch_size; x rollout.n = 2048
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
    "trainer.test_freq": 4,  # the seed says 5; rounded down to a multiple of sync_interval 4, as Trinity-RFT does
    "trainer.save_freq": 20,
    "actor_rollout_ref.actor.use_dynamic_bsz": True,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 24000,
    "trainer.project_name": "verl_grpo_example_gsm8k",
    "trainer.experiment_name": "deepseek_llm_7b_function_rm_seq_packing",
    "trainer.logger": ["console", "wandb"],
}
GRPO_MERGED = {  # trainer.trainer_config, over verl's defaults
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.ref.fsdp_config.param_offload": True,
    "trainer.critic_warmup": 0,
}
PPO_MAPPED = {
    "algorithm.adv_estimator": "gae",  # algorithm.adv_estimator=gae
    "algorithm.use_kl_in_reward": False,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.1,
    "actor_rollout_ref.model.path": f"{HOME}/models/Qwen2-7B-Instruct",
    "critic.model.path": f"{HOME}/models/Qwen2-7B-Instruct",
    "data.max_prompt_length": 1024,
    "data.max_response_length": 512,
    "data.filter_overlong_prompts": True,
    "data.train_batch_size": 1024,
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
    "trainer.total_epochs": 15,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.rollout.n": 1,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
    "trainer.test_freq": 4,  # as in the GRPO example
    "trainer.save_freq": 20,
    "trainer.val_before_train": False,
    "trainer.project_name": "verl_example",
    "trainer.experiment_name": "Qwen2-7B-Instruct_hybrid_rm",
    "trainer.logger": ["console", "wandb"],
}
PPO_MERGED = {
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
    "critic.model.use_remove_padding": True,
    "critic.model.enable_gradient_checkpointing": True,
    "critic.fsdp.param_offload": False,  # the seed's critic.model.fsdp_config (verl < 0.6 name)
    "critic.fsdp.optimizer_offload": False,
    "critic.optim.lr": 1e-5,
    "critic.optim.lr_warmup_steps_ratio": 0.05,
    "critic.ppo_micro_batch_size_per_gpu": 32,
    "trainer.critic_warmup": 0,
}


@pytest.fixture(autouse=True)
def seed_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", HOME)


def assert_fields(values: dict[str, Any], expected: dict[str, Any]) -> None:
    wrong = {key: (values.get(key), want) for key, want in expected.items() if values.get(key) != want}
    assert not wrong, wrong


@pytest.mark.parametrize(
    "seed, mapped", [("verl_grpo_example.yaml", GRPO_MAPPED), ("verl_ppo_example.yaml", PPO_MAPPED)]
)
def test_seed_examples_map_as_their_comments_say(seed: str, mapped: dict[str, Any]):
    assert_fields(trinity_fields(load_config(SEEDS / seed)), mapped)


@pytest.mark.parametrize(
    "seed, mapped, merged",
    [("verl_grpo_example.yaml", GRPO_MAPPED, GRPO_MERGED), ("verl_ppo_example.yaml", PPO_MAPPED, PPO_MERGED)],
)
def test_seed_examples_become_verl_configs(seed: str, mapped: dict[str, Any], merged: dict[str, Any]):
    pytest.importorskip("verl")
    config = verl_config(load_config(SEEDS / seed), device="cuda")
    values = {key: OmegaConf.select(config, key) for key in {**mapped, **merged}}
    values["trainer.logger"] = list(values["trainer.logger"])
    assert_fields(values, {**mapped, **merged})
    # trainer.trainer_strategy, Trinity-RFT's fsdp2 by default, for every FSDP role
    assert config.actor_rollout_ref.actor.strategy == config.critic.strategy == "fsdp2"
    assert config.actor_rollout_ref.actor.fsdp_config.strategy == config.critic.fsdp.strategy == "fsdp2"
    other = verl_config(load_config(SEEDS / seed, ["trainer.trainer_strategy=fsdp"]), device="cuda")
    assert other.actor_rollout_ref.ref.strategy == other.actor_rollout_ref.ref.fsdp_config.strategy == "fsdp"
    assert "fsdp_config" not in config.critic.model


def test_cpu_settings(tmp_path):
    pytest.importorskip("verl")
    config = verl_config(load_config(SEEDS / "verl_grpo_example.yaml"), device="cpu")
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    assert config.actor_rollout_ref.actor.fsdp_config.strategy == "fsdp2"
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert config.actor_rollout_ref.actor.use_torch_compile is False
    assert config.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"


def write_variant(tmp_path: Path, seed: str, *dotlist: str) -> Path:
    config = OmegaConf.load(SEEDS / seed)
    config.merge_with_dotlist(list(dotlist))
    path = tmp_path / seed
    OmegaConf.save(config, path)
    return path


def test_unknown_verl_keys_are_reported_with_the_nearest_key(tmp_path):
    pytest.importorskip("verl")
    path = write_variant(
        tmp_path,
        "verl_ppo_example.yaml",
        "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_sze_per_gpu=16",
        "trainer.trainer_config.critic.optim.learning_rate=1e-5",
    )
    with pytest.raises(ConfigError) as error:
        verl_config(load_config(path))
    message = str(error.value)
    assert (
        "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_sze_per_gpu: unknown verl key; "
        "did you mean 'trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'?"
    ) in message
    assert "trainer.trainer_config.critic.optim.learning_rate: unknown verl key" in message


def test_token_budgets_below_max_model_len_warn_counting_sequence_parallelism(tmp_path, caplog):
    pytest.importorskip("verl")
    key = "trainer.trainer_config.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"
    verl_config(load_config(write_variant(tmp_path, "verl_grpo_example.yaml", f"{key}=512")))
    assert f"{key}: 512 x ulysses_sequence_parallel_size 1 is below model.max_model_len 1024" in caplog.text
    caplog.clear()
    path = write_variant(tmp_path, "verl_grpo_example.yaml", f"{key}=512", "trainer.ulysses_sequence_parallel_size=2")
    verl_config(load_config(path))
    assert key not in caplog.text  # 512 x 2 holds a sample of 1024


def test_sequence_parallel_size_must_divide_the_trainer_gpus(tmp_path):
    pytest.importorskip("verl")
    path = write_variant(tmp_path, "verl_grpo_example.yaml", "trainer.ulysses_sequence_parallel_size=4")
    with pytest.raises(
        ConfigError, match=r"trainer.ulysses_sequence_parallel_size: 4 does not divide the trainer's 6 GPUs"
    ):
        verl_config(load_config(path))


def test_without_verl_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"trinity-verl\[engine\]"):
        verl_config(load_config(SEEDS / "verl_grpo_example.yaml"))


def trinity_config(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trinity.cli", "config", *args], capture_output=True, text=True, timeout=120
    )


def test_trinity_config_verl_prints_the_verl_config():
    pytest.importorskip("verl")
    result = trinity_config("verl", str(SEEDS / "verl_grpo_example.yaml"), "trainer.max_token_len_per_gpu=30000")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"] == 30000  # the override
    assert printed["actor_rollout_ref"]["rollout"]["n"] == 8
    assert printed["critic"]["ppo_max_token_len_per_gpu"] == 30000
    assert printed["trainer"]["default_local_dir"].endswith(
        "verl_grpo_example_gsm8k/deepseek_llm_7b_function_rm_seq_packing"
    )


def test_trinity_config_for_engines_without_a_config_of_their_own():
    result = trinity_config("torch", str(SEEDS / "verl_grpo_example.yaml"))
    assert result.returncode == 2
    assert "training engine 'torch' has no config of its own" in result.stderr
    result = trinity_config("verll", str(SEEDS / "verl_grpo_example.yaml"))
    assert result.returncode == 2
    assert "unknown trainer engine 'verll'; did you mean 'verl'?" in result.stderr


def test_rollout_correction_maps_onto_verls_keys():
    """``algorithm.rollout_correction`` (a preset expanded, the keys next to it winning) lands on
    verl's ``algorithm.rollout_correction``; with verl installed, the merged config holds it."""
    preset = "algorithm.rollout_correction.preset=decoupled_seq_is_rs"
    config = load_config(SEEDS / "verl_grpo_example.yaml", [preset, "algorithm.rollout_correction.rollout_is=token"])
    expected = {
        "algorithm.rollout_correction.rollout_is": "token",
        "algorithm.rollout_correction.rollout_is_threshold": 2.0,
        "algorithm.rollout_correction.rollout_is_batch_normalize": False,
        "algorithm.rollout_correction.rollout_rs": "seq_sum_k1",
        "algorithm.rollout_correction.rollout_rs_threshold": "0.5_2.0",
        "algorithm.rollout_correction.bypass_mode": False,
        "algorithm.rollout_correction.loss_type": "ppo_clip",
    }
    fields = trinity_fields(config)
    assert_fields(fields, expected)
    assert "algorithm.rollout_correction.preset" not in fields
    assert not any(
        k.startswith("algorithm.rollout_correction")
        for k in trinity_fields(load_config(SEEDS / "verl_grpo_example.yaml"))
    )
    if importlib.util.find_spec("verl") is not None:
        merged = verl_config(config, device="cuda")
        assert_fields({key: OmegaConf.select(merged, key) for key in expected}, expected)


def test_lora_maps_onto_verls_model_keys():
    """``model.lora_configs`` lands on verl's ``actor_rollout_ref.model`` LoRA keys; with verl
    installed, the merged config holds them."""
    lora = "model.lora_configs=[{name: lora, lora_rank: 8, lora_alpha: 16, target_modules: [q_proj, v_proj]}]"
    config = load_config(SEEDS / "verl_grpo_example.yaml", [lora])
    expected = {
        "actor_rollout_ref.model.lora_rank": 8,
        "actor_rollout_ref.model.lora_alpha": 16,
        "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"],
    }
    assert_fields(trinity_fields(config), expected)
    assert "actor_rollout_ref.model.lora_rank" not in trinity_fields(load_config(SEEDS / "verl_grpo_example.yaml"))
    if importlib.util.find_spec("verl") is not None:
        merged = OmegaConf.to_container(verl_config(config, device="cuda"), resolve=True)
        assert_fields({key: OmegaConf.select(OmegaConf.create(merged), key) for key in expected}, expected)

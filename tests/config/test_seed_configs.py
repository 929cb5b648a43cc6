"""Every YAML block of the seed documents loads and validates, with the derived values asserted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.seed_env import set_seed_env
from trinity.config import ConfigError, load_config
from trinity.config.rules import trainer_gpu_num

SEEDS = Path(__file__).parent / "seeds"


@pytest.fixture(autouse=True)
def seed_env(monkeypatch, tmp_path):
    """The environment variables the seed configs read, and a scratch working directory."""
    set_seed_env(monkeypatch, tmp_path)


def test_verl_grpo_example_derives_batch_sizes_kl_and_job_dir(tmp_path):
    cfg = load_config(SEEDS / "verl_grpo_example.yaml")
    assert cfg.buffer.train_batch_size == 2048
    assert cfg.algorithm.repeat_times == 8
    assert cfg.algorithm.kl_loss_fn == "low_var_kl"
    assert cfg.algorithm.kl_loss_fn_args["kl_coef"] == 0.001
    assert cfg.algorithm.entropy_loss_fn_args["entropy_coef"] == 0
    assert cfg.algorithm.advantage_fn == "grpo"
    assert cfg.algorithm.kl_penalty_fn == "none"
    assert cfg.algorithm.optimizer.lr == 1e-6
    expected = tmp_path / "checkpoints" / "verl_grpo_example_gsm8k" / "deepseek_llm_7b_function_rm_seq_packing"
    assert cfg.checkpoint_job_dir == str(expected)
    assert os.path.isabs(cfg.checkpoint_job_dir)
    assert cfg.ray_namespace == "verl_grpo_example_gsm8k/deepseek_llm_7b_function_rm_seq_packing"
    assert cfg.model.max_model_len == 1024
    assert cfg.trainer.max_token_len_per_gpu == 24000
    assert cfg.trainer.use_dynamic_bsz is True
    assert cfg.buffer.explorer_input.tasksets[0].repeat_times == 8
    assert cfg.buffer.explorer_input.eval_tasksets[0].repeat_times == 1
    assert cfg.synchronizer.sync_method == "nccl"  # mode both with vLLM engines
    assert trainer_gpu_num(cfg) == 6  # 8 GPUs - 1 engine x TP 2
    assert cfg.trainer.trainer_config["actor_rollout_ref"]["ref"]["fsdp_config"]["param_offload"] is True


def test_verl_ppo_example_derives_critic_and_gpu_split():
    cfg = load_config(SEEDS / "verl_ppo_example.yaml")
    assert cfg.algorithm.algorithm_type == "ppo"
    assert cfg.algorithm.advantage_fn == "ppo"
    assert cfg.algorithm.kl_loss_fn == "none"
    assert cfg.buffer.train_batch_size == 256
    assert cfg.model.max_model_len == 1536
    assert cfg.model.critic_model_path == f"{os.environ['HOME']}/models/Qwen2-7B-Instruct"
    assert cfg.algorithm.optimizer.lr_warmup_steps_ratio == 0.1
    assert [t.name for t in cfg.buffer.explorer_input.tasksets] == ["gsm8k", "math"]
    assert cfg.buffer.explorer_input.tasksets[1].rollout_args.temperature == 1.0
    assert trainer_gpu_num(cfg) == 4  # 8 - rollout 2 x 1 - reward model 2 x 1
    assert cfg.explorer.auxiliary_models[0].engine_num == 2
    assert cfg.trainer.trainer_config["critic"]["optim"]["lr"] == 1e-5


@pytest.mark.parametrize("fragment", ["verl_eval_tasksets_fragment.yaml", "verl_reward_model_fragment.yaml"])
def test_verl_guide_fragments_are_valid_sections(tmp_path, fragment):
    """The guide's partial blocks, merged into the GRPO example, still validate."""
    merged = OmegaConf.merge(OmegaConf.load(SEEDS / "verl_grpo_example.yaml"), OmegaConf.load(SEEDS / fragment))
    path = tmp_path / "merged.yaml"
    OmegaConf.save(merged, path)
    if "reward_model" in fragment:
        with pytest.raises(ConfigError) as err:
            load_config(path)
        # The only complaint is the user's own reward function, which a plugin would provide.
        assert [i.path for i in err.value.issues] == [
            "buffer.explorer_input.tasksets[0].default_reward_fn_type",
            "buffer.explorer_input.eval_tasksets[0].default_reward_fn_type",
        ]
        assert "custom_reward" in str(err.value)
        return
    cfg = load_config(path)
    aime = cfg.buffer.explorer_input.eval_tasksets[0]
    assert (aime.name, aime.repeat_times, aime.rollout_args.top_p) == ("AIME2024", 32, 0.7)


def test_async_explorer_and_trainer_meet_in_one_buffer():
    explorer = load_config(SEEDS / "async_explorer.yaml")
    trainer = load_config(SEEDS / "async_trainer.yaml")
    assert (explorer.mode, trainer.mode) == ("explore", "train")
    assert explorer.synchronizer.sync_method == trainer.synchronizer.sync_method == "checkpoint"
    assert explorer.checkpoint_job_dir == trainer.checkpoint_job_dir
    assert explorer.ray_namespace == trainer.ray_namespace == "async_demo/gsm8k_async"
    assert explorer.buffer.train_batch_size == trainer.buffer.train_batch_size == 512
    assert explorer.buffer.trainer_input.experience_buffer.path == "sqlite:///gsm8k.db"
    assert explorer.model.max_prompt_tokens == 1024  # 2048 - 1024
    assert explorer.buffer.explorer_input.tasksets[0].default_workflow_type == "math_workflow"
    assert explorer.buffer.explorer_input.tasksets[0].subset_name == "main"
    assert trainer_gpu_num(trainer) == 4
    assert trainer.trainer.max_token_len_per_gpu == 16384


def test_async_second_explorer_joins_under_its_own_name():
    first = load_config(SEEDS / "async_explorer.yaml")
    second = load_config(SEEDS / "async_explorer_new.yaml")
    assert second.explorer.name == "explorer_new" != first.explorer.name
    assert second.explorer.rollout_model.engine_num == 8
    assert second.ray_namespace == first.ray_namespace
    assert second.buffer.trainer_input.experience_buffer.name == first.buffer.trainer_input.experience_buffer.name


def test_configuration_guide_sections(tmp_path):
    cfg = load_config(SEEDS / "configuration_guide.yaml")
    operators = cfg.data_processor.experience_pipeline.operators
    assert operators[0].name == "data_juicer" and operators[0].args["np"] == 4
    assert operators[1].args["reward_shaping_configs"][0]["weight"] == 1.0
    assert cfg.checkpoint_job_dir == str(tmp_path / "checkpoints" / "Trinity-RFT" / "example")
    assert cfg.model.model_path == cfg.model.critic_model_path == str(tmp_path / "model")
    assert cfg.algorithm.kl_loss_fn == "k2" and cfg.algorithm.advantage_fn == "ppo"
    assert cfg.buffer.train_batch_size == 256  # given, not 32 x 8
    assert cfg.buffer.explorer_input.tasksets[0].name == "countdown_train"
    assert cfg.buffer.explorer_input.tasksets[0].path == str(tmp_path / "trinity_taskset_path")
    assert cfg.buffer.explorer_input.eval_tasksets[0].default_reward_fn_type == "countdown_reward"
    assert cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"].format.prompt_key == "question"
    assert cfg.explorer.auxiliary_models[0].model_path == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.synchronizer.sync_method == "nccl"
    assert cfg.trainer.total_steps == 1000
    assert cfg.service.data_juicer.port == 5005
    assert cfg.data_processor.task_pipeline.operators[0].name == "llm_difficulty_score_filter"
    assert [s.stage_name for s in cfg.stages] == ["sft_warmup", "rft"]
    assert cfg.stages[0].buffer["trainer_input"]["experience_buffer"]["path"] == str(tmp_path / "trinity_dataset_path")


def test_configuration_guide_verl_block_as_trainer_config_path():
    cfg = load_config(
        SEEDS / "verl_grpo_example.yaml",
        [
            "trainer.trainer_config=null",
            f"trainer.trainer_config_path={SEEDS / 'configuration_guide_verl_trainer.yaml'}",
        ],
    )
    verl = cfg.trainer.trainer_config
    assert verl["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] == 4
    assert verl["critic"]["cliprange_value"] == 0.5
    # Interpolations inside trainer_config refer to verl's own schema and are kept for it.
    assert verl["critic"]["forward_micro_batch_size_per_gpu"] == "${critic.ppo_micro_batch_size_per_gpu}"


def test_guide_backticks_give_a_clear_yaml_error(tmp_path):
    text = (SEEDS / "configuration_guide.yaml").read_text().replace("'plaintext'", "`plaintext`")
    path = tmp_path / "backticks.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=r"not valid YAML at line 70, column 22: found character .*that cannot start any token"
    ):
        load_config(path)

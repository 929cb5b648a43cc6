"""Trinity-RFT's own example configs (key structure rewritten in ``trinity_rft_examples/``) load here.

Each file loads, or its only errors are plugins trinity does not ship yet, listed per file in
``MISSING_PLUGINS`` (dotted key -> plugin name). The table must match exactly: a new error fails
the test, and so does an entry whose plugin has landed, so the table only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trinity.config import ConfigError, derive_and_check, load_config, load_stage_configs
from trinity.config.load import IssueCollector, parse_config, read_yaml
from trinity.config.rules import trainer_gpu_num

EXAMPLES = Path(__file__).parent / "trinity_rft_examples"
FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))

MISSING_PLUGINS: dict[str, dict[str, str]] = {
    "cod_mixed_multinode.yaml": {
        "algorithm.advantage_fn": "cod",
        "buffer.explorer_input.tasksets[0].default_workflow_type": "cod_frozenlake_obscure_workflow",
        "buffer.explorer_input.tasksets[1].default_workflow_type": "cod_random_alchemy_workflow",
    },
}
"""Plugins still missing. (tinker.yaml checks: the hosted Tinker backend is refused at run, tests/config/test_run_refusals.py.)"""

_PLUGIN_MESSAGES = (
    re.compile(r"^unknown [\w ]+? '(?P<name>[^']+)'"),
    re.compile(r"^'?(?P<name>[^' ]+)'? is provided by .+, which is not installed"),
    re.compile(r"^[\w.\[\]]+ '(?P<name>[^']+)' is provided by .+, which is not installed"),
)


def _missing_plugin(message: str) -> str | None:
    """The plugin name of a missing-plugin message, else None."""
    for pattern in _PLUGIN_MESSAGES:
        match = pattern.match(message)
        if match:
            return match.group("name")
    return None


@pytest.fixture(autouse=True)
def example_env(monkeypatch, tmp_path):
    """The environment variables the examples read; job folders land in a scratch directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tmp_path / "model"))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(tmp_path / "taskset"))
    monkeypatch.setenv("TRINITY_SFT_DATASET_PATH", str(tmp_path / "sft_dataset"))
    monkeypatch.setenv("FACTOR", "2.0")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for var in (
        "TRINITY_CHECKPOINT_ROOT_DIR",
        "TRINITY_RAY_ADDRESS",
        "TRINITY_LOG_DIR",
        "TRINITY_JUDGE_MODEL_NAME",
        "MODEL_PATH",
        "MAX_MODEL_LEN",
    ):
        monkeypatch.delenv(var, raising=False)


def _checked(name: str):
    """The derived config and the issues of a file, without raising (for files with missing plugins)."""
    issues = IssueCollector()
    config = derive_and_check(parse_config(read_yaml(EXAMPLES / name), issues), issues)
    return config, issues


def test_every_table_entry_names_a_fixture():
    assert set(MISSING_PLUGINS) <= set(FILES)
    assert len(FILES) >= 15


@pytest.mark.parametrize("name", FILES)
def test_example_loads_or_lacks_only_plugins(name):
    expected = MISSING_PLUGINS.get(name, {})
    try:
        load_config(EXAMPLES / name)
    except ConfigError as err:
        others = [str(issue) for issue in err.issues if _missing_plugin(issue.message) is None]
        assert not others, f"{name} is rejected for more than missing plugins:\n" + "\n".join(others)
        found = {issue.path: _missing_plugin(issue.message) for issue in err.issues}
        assert found == expected, f"{name}: missing plugins changed; update MISSING_PLUGINS"
        return
    assert not expected, f"{name} loads now: remove it from MISSING_PLUGINS"


# --- derived values ------------------------------------------------------------------------


def test_grpo_gsm8k_batch_sizes_sync_and_job_dir(tmp_path):
    cfg = load_config(EXAMPLES / "grpo_gsm8k_stages.yaml")
    assert cfg.buffer.train_batch_size == 96 * 8
    assert cfg.synchronizer.sync_method == "nccl"
    assert cfg.checkpoint_job_dir == str(tmp_path / "checkpoints" / "Trinity-RFT-gsm8k" / "qwen2.5-1.5B-gsm8k")
    assert cfg.ray_namespace == "Trinity-RFT-gsm8k/qwen2.5-1.5B-gsm8k"
    assert cfg.model.max_prompt_tokens == 1024
    train, (evaluation,) = cfg.buffer.explorer_input.tasksets[0], cfg.buffer.explorer_input.eval_tasksets
    assert (train.repeat_times, train.rollout_args.n, evaluation.repeat_times) == (8, 8, 1)
    assert train.path == evaluation.path == str(tmp_path / "taskset")
    assert evaluation.default_workflow_type == "math_workflow"
    assert trainer_gpu_num(cfg) == 6


def test_grpo_gsm8k_stages_sft_warmup_then_rft(tmp_path):
    sft, rft = load_stage_configs(EXAMPLES / "grpo_gsm8k_stages.yaml", warn=False)
    assert (sft.name, sft.mode, sft.algorithm.algorithm_type) == ("qwen2.5-1.5B-gsm8k/sft_warmup", "train", "sft")
    assert (sft.buffer.train_batch_size, sft.buffer.total_steps) == (128, 10)
    experience = sft.buffer.trainer_input.experience_buffer
    assert (experience.storage_type, experience.path) == ("file", str(tmp_path / "sft_dataset"))
    assert (experience.format.prompt_type, experience.format.messages_key) == ("messages", "messages")
    assert sft.synchronizer.sync_method == "checkpoint"
    assert sft.checkpoint_job_dir.endswith("qwen2.5-1.5B-gsm8k/sft_warmup")
    assert (rft.name, rft.mode, rft.algorithm.algorithm_type) == ("qwen2.5-1.5B-gsm8k/rft", "both", "grpo")
    assert (rft.buffer.train_batch_size, rft.synchronizer.sync_method) == (768, "nccl")


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("rloo_gsm8k.yaml", "advantage_fn", "rloo"),
        ("reinforceplusplus_gsm8k.yaml", "advantage_fn", "reinforceplusplus"),
        ("gspo_gsm8k.yaml", "policy_loss_fn", "gspo"),
    ],
)
def test_algorithm_presets_fill_the_functions(name, field, value):
    cfg = load_config(EXAMPLES / name)
    assert getattr(cfg.algorithm, field) == value
    assert cfg.buffer.train_batch_size == 768
    assert trainer_gpu_num(cfg) == 1  # 2 GPUs - 1 rollout engine


def test_ppo_countdown_critic_and_verl_section():
    cfg = load_config(EXAMPLES / "ppo_countdown.yaml")
    assert (cfg.algorithm.advantage_fn, cfg.algorithm.kl_penalty_fn) == ("ppo", "none")
    assert cfg.model.critic_model_path == cfg.model.model_path
    assert cfg.buffer.train_batch_size == 96 * 5
    assert cfg.trainer.trainer_config["critic"]["cliprange_value"] == 0.5
    assert cfg.buffer.explorer_input.tasksets[0].default_reward_fn_type == "countdown_reward"


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("ppo_countdown.yaml", ("critic", "forward_max_token_len_per_gpu")),
        ("ppo_countdown_megatron.yaml", ("critic", "forward_micro_batch_size_per_gpu")),
    ],
)
def test_trainer_config_interpolations_into_the_trinity_tree_resolve(name, key):
    """``${trainer.trainer_config.critic.X}`` names the Trinity config's own tree; Trinity-RFT 0.6
    resolves it when it loads the file (``OmegaConf.to_object``), so verl gets the number."""
    cfg = load_config(EXAMPLES / name)
    section, leaf = key
    source = leaf.replace("forward_", "ppo_")
    assert cfg.trainer.trainer_config[section][leaf] == cfg.trainer.trainer_config[section][source]


def test_async_explorer_and_trainer_share_buffer_and_job_dir():
    explorer, _ = _checked("m2po_explorer.yaml")
    trainer, _ = _checked("m2po_trainer.yaml")
    assert (explorer.mode, trainer.mode) == ("explore", "train")
    assert explorer.synchronizer.sync_method == trainer.synchronizer.sync_method == "checkpoint"
    assert explorer.checkpoint_job_dir == trainer.checkpoint_job_dir
    assert explorer.buffer.train_batch_size == trainer.buffer.train_batch_size == 256
    explorer_buffer = explorer.buffer.trainer_input.experience_buffer
    trainer_buffer = trainer.buffer.trainer_input.experience_buffer
    assert explorer_buffer.path == trainer_buffer.path == "sqlite:///m2po_gsm8k.db"
    assert explorer.algorithm.bypass_old_logprobs is True


def test_sft_reads_a_messages_dataset():
    cfg = load_config(EXAMPLES / "sft_mot.yaml")
    assert (cfg.mode, cfg.buffer.train_batch_size, cfg.synchronizer.sync_method) == ("train", 64, "checkpoint")
    experience = cfg.buffer.trainer_input.experience_buffer
    assert (experience.storage_type, experience.subset_name, experience.format.prompt_type) == (
        "file",
        "math",
        "messages",
    )
    assert cfg.model.max_prompt_tokens == 512
    assert cfg.trainer.max_token_len_per_gpu == 22000


def test_dpo_renames_warmup_style_and_keeps_the_schedule():
    cfg = load_config(EXAMPLES / "dpo_humanlike.yaml")
    optimizer = cfg.algorithm.optimizer
    assert (optimizer.lr_scheduler_type, optimizer.min_lr_ratio, optimizer.betas) == ("cosine", 0.1, [0.9, 0.95])
    assert (cfg.algorithm.kl_loss_fn, cfg.algorithm.kl_loss_fn_args["kl_coef"]) == ("k1", 0.1)
    experience = cfg.buffer.trainer_input.experience_buffer
    assert (experience.format.prompt_type, experience.format.chosen_key) == ("plaintext", "chosen")
    assert (experience.total_epochs, cfg.trainer.total_steps) == (2, 200)


def test_experience_replay_normalises_the_sync_style():
    cfg = load_config(EXAMPLES / "ppo_countdown_exp_replay.yaml")
    assert cfg.synchronizer.sync_style == "explorer_driven"  # written dynamic_by_explorer
    replay = cfg.buffer.trainer_input.experience_buffer.replay_buffer
    assert (replay.enable, replay.priority_fn, replay.reuse_cooldown_time) == (True, "decay_limit_randomization", 40)
    assert replay.priority_fn_args == {
        "decay": 2.0,
        "use_count_limit": 3,
        "sigma": 0.0,
        "seed": None,
    }  # defaults filled
    assert cfg.buffer.train_batch_size == 480
    assert trainer_gpu_num(cfg) == 6  # 7 GPUs - 1 rollout engine


def test_guide_explorer_sections_over_rollout_yarn_and_lr_schedule():
    cfg = load_config(EXAMPLES / "config_guide_explorer_sync.yaml")
    assert cfg.synchronizer.sync_style == "explorer_driven"
    assert (cfg.synchronizer.sync_offset, cfg.explorer.eval_interval) == (1, 100)
    assert (cfg.explorer.over_rollout.ratio, cfg.explorer.dynamic_timeout.enable) == (0.25, True)
    assert cfg.model.rope_scaling == {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 40960}
    assert (cfg.model.max_model_len, cfg.model.max_response_tokens) == (4096, 2048)
    optimizer = cfg.algorithm.optimizer
    assert (optimizer.lr_scheduler_type, optimizer.lr_warmup_steps_ratio, optimizer.min_lr_ratio) == (
        "cosine",
        0.1,
        0.1,
    )
    assert cfg.explorer.auxiliary_models[0].model_path == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.trainer.trainer_strategy == "fsdp"


def test_bench_external_model_evaluates_only():
    cfg = load_config(EXAMPLES / "bench_external_model.yaml")
    assert cfg.mode == "bench" and cfg.buffer.explorer_input.tasksets == []
    (evaluation,) = cfg.buffer.explorer_input.eval_tasksets
    assert (evaluation.default_workflow_type, evaluation.repeat_times) == ("math_workflow", 1)
    assert cfg.model.external_model.enable is True
    assert cfg.explorer.rollout_model.external_model_config.model_name == "qwen3-max"
    assert cfg.synchronizer.sync_method == "checkpoint"


def test_serve_mode_keys():
    cfg = load_config(EXAMPLES / "serve_mode.yaml")
    assert (cfg.mode, cfg.synchronizer.sync_method) == ("serve", "checkpoint")
    assert (cfg.explorer.proxy_port, cfg.explorer.min_running_model_num) == (8010, 2)
    assert (cfg.explorer.listen_address, cfg.explorer.rollout_model.api_key) == ("0.0.0.0", "serve-secret")
    assert cfg.explorer.rollout_model.tool_call_parser == "hermes"
    experience = cfg.buffer.trainer_input.experience_buffer
    assert (experience.name, experience.storage_type, experience.batch_size) == ("serve_history", "sql", 64)


def test_lora_and_pipelines_are_accepted(tmp_path):
    lora = load_config(EXAMPLES / "grpo_lora_gsm8k.yaml")
    assert lora.model.lora_configs[0].lora_rank == 32
    assert lora.synchronizer.sync_method == "checkpoint"
    tasks = load_config(EXAMPLES / "gsm8k_task_pipeline.yaml")
    assert tasks.data_processor.task_pipeline.inputs == [str(tmp_path / "taskset")]
    assert tasks.service.data_juicer.auto_start is True
    experiences, issues = _checked("gsm8k_experience_pipeline.yaml")
    operators = experiences.data_processor.experience_pipeline.operators
    assert [op.name for op in operators] == ["data_juicer", "reward_shaping_mapper"]
    assert operators[0].args["config_path"].endswith("dj_scoring_exp.yaml") and not issues.issues


def test_multi_step_alfworld_derived_values(tmp_path):
    cfg, _ = _checked("alfworld_multi_step.yaml")
    assert cfg.synchronizer.sync_style == "explorer_driven"
    assert cfg.buffer.train_batch_size == 7680  # given, not 16 x 16
    assert cfg.explorer.env_vars == {"TMPDIR": str(tmp_path)}
    assert cfg.cluster.ray_address == "auto"
    assert cfg.explorer.rollout_model.enable_thinking is False  # from model.enable_thinking
    assert trainer_gpu_num(cfg) == 4  # 8 - 2 engines x TP 2


def test_multi_node_cod_job_dir_interpolation_and_gpu_split(tmp_path):
    cfg, issues = _checked("cod_mixed_multinode.yaml")
    assert cfg.checkpoint_job_dir == str(
        tmp_path / "checkpoints" / "trinity-cod-final" / "mixed_flobs_alchran" / "qwen3-8b-mixed"
    )
    # cod's keys set off Trinity-RFT's defaults say they have no effect; task_pack_size is at its default
    assert [i.path for i in issues.inert if i.path.startswith("cod.")] == [
        "cod.eval_task_pack_size",
        "cod.cod_workflow_args",
    ]
    assert (cfg.cluster.trainer_gpu_num, cfg.cluster.trainer_node_num) == (24, 3)  # 4 x 8 - 8 engines
    assert [t.name for t in cfg.buffer.explorer_input.tasksets] == ["frozenlake_obscure", "alchemy_random"]
    assert cfg.buffer.trainer_input.experience_buffer.replay_buffer.priority_fn_args["sigma"] == 2.0


def test_dapo_eval_interval_rounds_to_the_sync_interval():
    cfg, _ = _checked("dapo_math.yaml")
    assert cfg.explorer.eval_interval == 16  # 10 is below sync_interval 16: Trinity-RFT uses 16
    (aime,) = cfg.buffer.explorer_input.eval_tasksets
    assert (aime.repeat_times, aime.rollout_args.top_p, aime.default_reward_fn_type) == (32, 0.7, "math_dapo_reward")
    assert cfg.buffer.train_batch_size == 32 * 16


def test_mix_chord_auxiliary_sft_buffer():
    cfg, _ = _checked("mix_chord.yaml")
    expert = cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert (expert.name, expert.total_epochs, expert.batch_size) == ("SFT_data", 25, 320)
    assert cfg.monitor.monitor_type == ["wandb"]

"""Bad configs: every error is reported, each with its dotted path and a way out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from config_helpers import issues_of, write

from trinity.config import ConfigError, load_config, load_stage_configs, to_yaml


def test_base_config_is_valid_and_derives(tmp_path):
    cfg = load_config(write(tmp_path))
    assert cfg.buffer.train_batch_size == 16
    assert cfg.synchronizer.sync_method == "memory"  # mode both, reference rollout engine
    assert cfg.model.max_model_len == 96
    assert cfg.algorithm.policy_loss_fn == "ppo" and "clip_range" in cfg.algorithm.policy_loss_fn_args


def test_unknown_advantage_fn_names_key_suggestion_and_installed(tmp_path):
    found = issues_of(write(tmp_path), ["algorithm.advantage_fn=grpoo"])
    message = found["algorithm.advantage_fn"]
    assert "'grpoo'" in message and "did you mean 'grpo'" in message
    assert "rloo" in message and "reinforceplusplus" in message


def test_cli_prints_every_error_and_exits_2(tmp_path):
    path = write(tmp_path, "monitor: {monitor_typ: console}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity.cli",
            "config",
            "check",
            str(path),
            "algorithm.advantage_fn=grpoo",
            "buffer.batch_size=abc",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "3 errors" in result.stderr
    assert "monitor.monitor_typ: unknown key; did you mean 'monitor.monitor_type'?" in result.stderr
    assert "buffer.batch_size: expected int, got str 'abc'" in result.stderr
    assert "algorithm.advantage_fn:" in result.stderr


def test_run_reports_a_config_that_does_not_parse_before_starting_ray(tmp_path):
    path = write(tmp_path, "monitor: {monitor_typ: console}\n")
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "run", "--config", str(path), "algorithm.advantage_fn=grpoo"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "2 errors" in result.stderr  # the typo and the plugin check's finding, in one report
    assert "monitor.monitor_typ: unknown key; did you mean 'monitor.monitor_type'?" in result.stderr
    assert "algorithm.advantage_fn:" in result.stderr
    assert "Ray" not in result.stdout + result.stderr


def test_cli_prints_resolved_yaml(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "config", "check", str(write(tmp_path)), "buffer.batch_size=8"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "train_batch_size: 32" in result.stdout
    assert f"checkpoint_job_dir: {tmp_path / 'ckpt' / 'demo' / 'run'}" in result.stdout


def test_nested_unknown_key_and_list_index_in_path(tmp_path):
    found = issues_of(write(tmp_path), ["explorer.auxiliary_models=[{model_path: /judge, tensor_paralel_size: 2}]"])
    assert found["explorer.auxiliary_models[0].tensor_paralel_size"] == (
        "unknown key; did you mean 'explorer.auxiliary_models[0].tensor_parallel_size'?"
    )


def test_missing_environment_variable_names_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_TRINITY_VAR", raising=False)
    found = issues_of(write(tmp_path), ["model.model_path=${oc.env:NO_SUCH_TRINITY_VAR}"])
    assert "NO_SUCH_TRINITY_VAR" in found["model.model_path"]


def test_interpolation_and_env_default(tmp_path, monkeypatch):
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    cfg = load_config(
        write(tmp_path),
        [
            "model.critic_model_path=${model.model_path}",
            f"checkpoint_root_dir=${{oc.env:TRINITY_CHECKPOINT_ROOT_DIR,{tmp_path}/x}}",
        ],
    )
    assert cfg.model.critic_model_path == "/models/tiny"
    assert cfg.checkpoint_job_dir == str(tmp_path / "x" / "demo" / "run")


def test_gpu_allocation_error_shows_the_arithmetic(tmp_path):
    found = issues_of(
        write(tmp_path),
        [
            "cluster.gpu_per_node=4",
            "explorer.rollout_model.engine_num=2",
            "explorer.rollout_model.tensor_parallel_size=2",
        ],
    )
    assert found["explorer.rollout_model.engine_num"] == (
        "no GPU left for the trainer: rollout_model 2 engines x 2 GPUs = 4 GPUs for the explorer, "
        "of node_num 1 x gpu_per_node 4 = 4: lower explorer.rollout_model.engine_num or tensor_parallel_size, "
        "or raise cluster.node_num or cluster.gpu_per_node"
    )
    one_gpu = issues_of(write(tmp_path), ["cluster.node_num=1", "cluster.gpu_per_node=1"])
    assert one_gpu["explorer.rollout_model.engine_num"].endswith(
        "; or mode: colocate, which shares one GPU between explorer and trainer"
    )
    explore_only = issues_of(
        write(tmp_path), ["mode=explore", "cluster.gpu_per_node=1", "explorer.rollout_model.engine_num=2"]
    )
    assert explore_only["explorer.rollout_model.engine_num"].startswith("not enough GPUs: rollout_model 2 engines")


def test_sync_method_must_suit_the_mode(tmp_path, caplog):
    """As Trinity-RFT turns nccl into checkpoint outside one run, with a warning."""
    cfg = load_config(write(tmp_path), ["mode=train", "synchronizer.sync_method=memory", "buffer.train_batch_size=16"])
    assert cfg.synchronizer.sync_method == "checkpoint"
    assert "mode 'train' runs them apart: using checkpoint" in caplog.text


def test_nccl_sync_needs_vllm_engines(tmp_path):
    found = issues_of(write(tmp_path), ["synchronizer.sync_method=nccl"])
    assert found["synchronizer.sync_method"] == (
        "'nccl' broadcasts into vLLM engines only (explorer.rollout_model.engine_type is 'transformers'); "
        "use memory (mode both) or checkpoint, which work with every engine"
    )


def test_queue_buffer_gets_a_file_when_processes_are_apart(tmp_path):
    cfg = load_config(write(tmp_path), ["mode=explore"])
    assert cfg.synchronizer.sync_method == "checkpoint"
    assert cfg.buffer.trainer_input.experience_buffer.path == str(
        tmp_path / "ckpt" / "demo" / "run" / "buffer" / "experience_buffer.db"
    )


def test_a_sql_buffer_without_a_path_gets_a_sqlite_file_in_the_job_folder(tmp_path):
    """As Trinity-RFT's default storage path; it was an error in the explorer's actor at run time."""
    cfg = load_config(write(tmp_path), ["buffer.trainer_input.experience_buffer.storage_type=sql"])
    assert cfg.buffer.trainer_input.experience_buffer.path == str(
        tmp_path / "ckpt" / "demo" / "run" / "buffer" / "experience_buffer.db"
    )


def test_critic_warmup_without_a_critic_says_the_actor_trains_from_the_first_step(tmp_path, caplog):
    load_config(write(tmp_path), ["algorithm.algorithm_type=grpo", "trainer.critic_warmup=3"])
    assert "trainer.critic_warmup: algorithm_type 'grpo' has no critic to warm up" in caplog.text
    caplog.clear()
    load_config(write(tmp_path), ["algorithm.algorithm_type=ppo", "trainer.critic_warmup=3"])
    assert "critic_warmup" not in caplog.text


def test_eval_interval_rounds_down_to_a_sync_multiple(tmp_path):
    """As Trinity-RFT: the nearest multiple below, at least one sync interval."""
    cfg = load_config(write(tmp_path), ["synchronizer.sync_interval=4", "explorer.eval_interval=10"])
    assert cfg.explorer.eval_interval == 8
    cfg = load_config(write(tmp_path), ["synchronizer.sync_interval=4", "explorer.eval_interval=3"])
    assert cfg.explorer.eval_interval == 4


def test_timestamp_rename_when_not_continuing(tmp_path, caplog):
    job = tmp_path / "ckpt" / "demo" / "run"
    job.mkdir(parents=True)
    (job / "something").write_text("old run")
    cfg = load_config(write(tmp_path), ["continue_from_checkpoint=false"])
    assert cfg.name.startswith("run_") and len(cfg.name) == len("run_20260101120000")
    assert cfg.checkpoint_job_dir == str(job.with_name(cfg.name))
    assert (
        f"name: renamed 'run' -> '{cfg.name}': {job} is not empty and continue_from_checkpoint is false" in caplog.text
    )
    assert load_config(write(tmp_path)).checkpoint_job_dir == str(job)  # continuing keeps the name


def test_a_renamed_job_keeps_its_name_when_derived_again_until_its_folder_exists(tmp_path, monkeypatch):
    """The launcher derives a config twice (again with the cluster's GPUs): both passes must
    name the same job, even across a second boundary; a later run there gets a new name."""
    import trinity.config.derive as derive

    job = tmp_path / "ckpt" / "demo" / "run"
    job.mkdir(parents=True)
    (job / "something").write_text("old run")
    stamps = iter(["20260101120000", "20260101120001", "20260101120002"])
    monkeypatch.setattr(derive, "datetime", type("Clock", (), {"now": staticmethod(lambda: _Stamp(next(stamps)))}))
    first = load_config(write(tmp_path), ["continue_from_checkpoint=false"])
    again = load_config(write(tmp_path), ["continue_from_checkpoint=false"])
    assert first.name == again.name == "run_20260101120000"
    Path(first.checkpoint_job_dir).mkdir()
    (Path(first.checkpoint_job_dir) / "meta").mkdir()  # that run started
    assert load_config(write(tmp_path), ["continue_from_checkpoint=false"]).name == "run_20260101120001"


class _Stamp:
    def __init__(self, text: str):
        self.text = text

    def strftime(self, _: str) -> str:
        return self.text


def test_token_limits(tmp_path, caplog):
    found = issues_of(write(tmp_path), ["model.max_model_len=80"])
    assert found["model.max_model_len"] == "max_prompt_tokens 64 + max_response_tokens 32 = 96 exceeds max_model_len 80"
    found = issues_of(write(tmp_path), ["model.max_prompt_tokens=null"])
    assert "set it, or both model.max_prompt_tokens and model.max_response_tokens" in found["model.max_model_len"]
    # As Trinity-RFT: a minimum equal to the maximum is lowered, and the rest derived from what is given.
    cfg = load_config(write(tmp_path), ["model.min_response_tokens=32"])
    assert cfg.model.min_response_tokens == 31 and "model.min_response_tokens: 32 leaves no room" in caplog.text
    # Unlike Trinity-RFT, which lowers it too, a minimum over the maximum is a mistake to correct.
    found = issues_of(write(tmp_path), ["model.min_response_tokens=40"])
    assert found["model.min_response_tokens"] == (
        "40 is more than max_response_tokens 32: lower model.min_response_tokens or raise model.max_response_tokens"
    )
    cfg = load_config(
        write(tmp_path), ["model.max_model_len=100", "model.max_prompt_tokens=null", "model.max_response_tokens=null"]
    )
    assert (cfg.model.max_prompt_tokens, cfg.model.max_response_tokens) == (50, 50)
    cfg = load_config(
        write(tmp_path), ["model.max_model_len=100", "model.max_prompt_tokens=null", "model.max_response_tokens=200"]
    )
    assert (cfg.model.max_prompt_tokens, cfg.model.max_response_tokens) == (1, 99)


def test_repeat_times_and_forced_values(tmp_path):
    """A group algorithm with one rollout per task trains on nothing (Trinity-RFT runs it anyway)."""
    found = issues_of(write(tmp_path), ["algorithm.repeat_times=1"])
    assert found["algorithm.repeat_times"] == (
        "algorithm 'grpo' compares several rollouts of a task, and repeat_times is 1: every advantage would be 0; "
        "set algorithm.repeat_times to 2 or more"
    )
    # no training on these rollouts; an advantage that does not compare a group; verl's GRPO keeps a lone score
    for accepted in (
        ["mode=bench"],
        ["algorithm.advantage_fn=reinforceplusplus"],
        ["algorithm.algorithm_type=grpo_verl"],
    ):
        assert load_config(write(tmp_path), ["algorithm.repeat_times=1", *accepted]).algorithm.repeat_times == 1
    cfg = load_config(
        write(tmp_path),
        ["algorithm.algorithm_type=dpo", "algorithm.repeat_times=1", "mode=train", "buffer.train_batch_size=8"],
    )
    assert cfg.algorithm.repeat_times == 2


def test_unknown_function_argument(tmp_path):
    found = issues_of(write(tmp_path), ["algorithm.kl_loss_fn=k2", "algorithm.kl_loss_fn_args.kl_cof=0.1"])
    assert found["algorithm.kl_loss_fn_args.kl_cof"] == "unknown key; did you mean 'algorithm.kl_loss_fn_args.kl_coef'?"


def test_algorithm_function_arguments_are_typed_and_ranged_by_their_args_model(tmp_path):
    """grpo's advantage declares std_threshold >= 0 and std_cal_level group|batch (its Args)."""
    overrides = ["algorithm.advantage_fn_args={std_threshold: -1, std_cal_level: everywhere}"]
    found = issues_of(write(tmp_path), overrides)
    assert found["algorithm.advantage_fn_args.std_threshold"] == "must be >= 0.0, got -1"
    assert "'everywhere' is not one of group, batch" in found["algorithm.advantage_fn_args.std_cal_level"]
    cfg = load_config(write(tmp_path), ["algorithm.advantage_fn_args={std_threshold: 0.01}"])
    assert cfg.algorithm.advantage_fn_args["std_threshold"] == 0.01
    assert cfg.algorithm.advantage_fn_args["std_cal_level"] == "group"  # defaults filled in


def test_stage_sections_are_checked(tmp_path):
    path = write(tmp_path, "stages:\n  - {stage_name: warm, algorithm: {algorithm_typ: sft}}\n  - {stage_name: warm}\n")
    found = issues_of(path)
    assert (
        found["stages[0].algorithm.algorithm_typ"] == "unknown key; did you mean 'stages[0].algorithm.algorithm_type'?"
    )
    assert "used twice" in found["stages[1].stage_name"]


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("project: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="is not key=value"):
        load_config(write(tmp_path), ["buffer.batch_size"])


def test_overrides_reach_list_items_and_a_bad_index_is_named(tmp_path):
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "quickstart.yaml"
    stages = load_stage_configs(quickstart, ["stages.0.buffer.total_epochs=6", "buffer.total_epochs=4"])
    assert [stage.buffer.total_epochs for stage in stages] == [6, 4]
    with pytest.raises(ConfigError) as caught:
        load_stage_configs(quickstart, ["stages.7.mode=train"])
    assert "stages.7.mode: cannot apply the override 'stages.7.mode=train': list index out of range" in str(
        caught.value
    )


def test_global_loss_agg_mode_reaches_the_loss_functions(tmp_path):
    cfg = load_config(write(tmp_path), ["algorithm.loss_agg_mode=seq-mean-token-sum", "algorithm.kl_loss_fn=k2"])
    assert cfg.algorithm.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-sum"
    assert cfg.algorithm.kl_loss_fn_args["loss_agg_mode"] == "seq-mean-token-sum"
    own = load_config(write(tmp_path), ["algorithm.policy_loss_fn_args={loss_agg_mode: token-mean}"])
    assert own.algorithm.policy_loss_fn_args["loss_agg_mode"] == "token-mean"


def test_stages_replace_the_sections_they_give_and_rederive_per_mode(tmp_path):
    """As Trinity-RFT: a stage's section replaces the global one, keys it leaves out take defaults."""
    from trinity.config import load_stage_configs

    sft = "buffer: {train_batch_size: 8, trainer_input: {experience_buffer: {path: /data/sft.jsonl}}}"
    path = write(
        tmp_path,
        f"stages:\n  - {{stage_name: warm, mode: train, algorithm: {{algorithm_type: sft}}, {sft}}}\n"
        "  - {stage_name: rl}\n",
    )
    warm, rl = load_stage_configs(path, ["synchronizer.sync_method=memory", "algorithm.optimizer.lr=1e-4"])
    assert (warm.name, warm.mode, warm.algorithm.algorithm_type) == ("run/warm", "train", "sft")
    assert warm.algorithm.optimizer.lr == 1e-6 and warm.buffer.batch_size == 1  # defaults, not the global values
    assert rl.algorithm.optimizer.lr == 1e-4 and rl.buffer.batch_size == 4  # no section given: the global ones
    assert warm.synchronizer.sync_method == "checkpoint"  # re-derived for mode train
    assert (rl.name, rl.mode, rl.algorithm.algorithm_type) == ("run/rl", "both", "grpo")
    assert rl.synchronizer.sync_method == "memory"
    assert rl.checkpoint_job_dir == str(tmp_path / "ckpt" / "demo" / "run" / "rl")


def test_mix_needs_its_expert_buffer(tmp_path):
    path = write(tmp_path)
    found = issues_of(path, ["algorithm.algorithm_type=mix"])
    assert (
        "'sft_dataset', which is not configured (configured: none)" in found["buffer.trainer_input.auxiliary_buffers"]
    )
    renamed = ["algorithm.algorithm_type=mix", "algorithm.sample_strategy_args={sft_dataset_name: experts}"]
    renamed.append("buffer.trainer_input.auxiliary_buffers={experts: {storage_type: file, path: /data/sft}}")
    assert load_config(path, renamed).algorithm.sample_strategy_args["sft_dataset_name"] == "experts"


def test_an_experience_buffer_schema_type_other_than_the_algorithm_s_warns(tmp_path, caplog):
    path = write(tmp_path)
    buffer = "buffer.trainer_input.experience_buffer"
    assert load_config(
        path, [f"{buffer}.schema_type=experience"]
    ).buffer.trainer_input.experience_buffer.schema_type == ("rollout")
    assert "schema_type" not in caplog.text  # Trinity-RFT's name of the rollout schema
    cfg = load_config(path, [f"{buffer}.schema_type=dpo"])
    assert cfg.buffer.trainer_input.experience_buffer.schema_type == "rollout"
    assert "algorithm 'grpo' trains on rollout data, not dpo: using rollout" in caplog.text


def test_replay_buffer_priority_fn_and_its_args_are_checked(tmp_path):
    key = "buffer.trainer_input.experience_buffer.replay_buffer"
    found = issues_of(write(tmp_path), [f"{key}.enable=true", f"{key}.priority_fn=linear_decy"])
    assert "did you mean 'linear_decay'" in found[f"{key}.priority_fn"]
    bad_args = f"{key}.priority_fn_args={{sigma: -1, decai: 1}}"
    found = issues_of(write(tmp_path), [f"{key}.enable=true", f"{key}.priority_fn=decay_limit_randomization", bad_args])
    assert found[f"{key}.priority_fn_args.sigma"].startswith("must be >= 0")
    assert found[f"{key}.priority_fn_args.decai"].startswith("unknown key; did you mean")
    # replay on the sqlite queue of explorer and trainer apart: acted on, so --strict accepts it
    cfg = load_config(write(tmp_path), [f"{key}.enable=true", "mode=explore"], strict=True)
    experience = cfg.buffer.trainer_input.experience_buffer
    assert experience.path.endswith("experience_buffer.db")
    assert experience.replay_buffer.priority_fn_args == {"decay": 2.0}  # linear_decay's defaults filled in
    # replay settings while replay is off do nothing: --strict refuses them, by name
    found = issues_of(write(tmp_path), [f"{key}.reuse_cooldown_time=5"], strict=True)
    assert found[f"{key}.reuse_cooldown_time"] == "replay_buffer.enable is false"


def test_an_endpoint_beyond_loopback_needs_an_api_key(tmp_path):
    """The serve proxy and the OpenAI endpoints listen on 127.0.0.1 unless a key guards them
    (Trinity-RFT's proxy listens on 0.0.0.0 with none); its ``EMPTY`` default means no key."""
    path = write(tmp_path)
    assert load_config(path, ["mode=serve"]).explorer.listen_address == "127.0.0.1"
    proxy = ["mode=serve", "explorer.listen_address=0.0.0.0"]
    for no_key in ([], ["explorer.rollout_model.api_key=EMPTY"]):
        message = issues_of(path, [*proxy, *no_key])["explorer.listen_address"]
        assert message.startswith("'0.0.0.0' opens the serve proxy to other hosts: set explorer.rollout_model.api_key")
    keyed = load_config(path, [*proxy, "explorer.rollout_model.api_key=sesame"])
    assert keyed.explorer.rollout_model.api_key == "sesame"
    assert "sesame" not in to_yaml(keyed) and "api_key: <hidden>" in to_yaml(keyed)  # the run's records
    assert "api_key: EMPTY" in to_yaml(load_config(path))
    endpoint = ["explorer.rollout_model.enable_openai_api=true", "explorer.rollout_model.openai_api_host=0.0.0.0"]
    message = issues_of(path, endpoint)["explorer.rollout_model.openai_api_host"]
    assert "set explorer.rollout_model.api_key or bind 127.0.0.1" in message
    load_config(path, [*endpoint, "explorer.rollout_model.api_key=sesame"], strict=True)  # acted on: no warning


def test_a_database_password_stays_out_of_the_runs_records(tmp_path):
    """A PostgreSQL buffer's URL keeps its password for the run, and shows *** in config.yaml,
    ``trinity config check`` and the trackers' copy."""
    url = "postgresql://trinity:s3cret@db.example:5432/runs"
    cfg = load_config(
        write(tmp_path),
        [
            "mode=explore",
            "buffer.trainer_input.experience_buffer.storage_type=sql",
            f"buffer.trainer_input.experience_buffer.path={url}",
        ],
    )
    assert cfg.buffer.trainer_input.experience_buffer.path == url
    records = to_yaml(cfg)
    assert "s3cret" not in records and "path: postgresql://trinity:***@db.example:5432/runs" in records


def test_trusting_pickled_rows_warns_where_no_database_could_hold_them(tmp_path, caplog):
    key = "buffer.trainer_input.experience_buffer"
    load_config(write(tmp_path), [f"{key}.trust_pickled_rows=true"])  # mode both: an in-memory queue
    assert (
        f"{key}.trust_pickled_rows: only a database holds pickled rows; this buffer is queue in memory" in caplog.text
    )
    caplog.clear()
    load_config(write(tmp_path), ["mode=explore", f"{key}.trust_pickled_rows=true"])  # a queue in a sqlite file
    assert "only a database holds pickled rows" not in caplog.text


def test_workflow_args_without_a_required_key_is_an_error_naming_it(tmp_path):
    taskset = "buffer.explorer_input.taskset"
    overrides = [
        f"{taskset}.default_workflow_type=required_args_workflow.RequiredArgsWorkflow",
        f"{taskset}.workflow_args={{turns: 3}}",
    ]
    with pytest.raises(ConfigError) as err:  # a ConfigError, not pydantic's (a traceback in the CLI)
        load_config(write(tmp_path), overrides, run=True)  # a run imports the dotted path and checks its args
    found = {issue.path: issue.message for issue in err.value.issues}
    assert found == {f"{taskset}.workflow_args.env_url": "required: the environment's address"}, found


def test_grad_offload_on_an_engine_without_it_is_an_error_naming_the_way_out(tmp_path):
    found = issues_of(write(tmp_path), ["trainer.trainer_type=verl", "trainer.grad_offload=true"])
    assert "use trainer.param_offload or offload_policy" in found["trainer.grad_offload"], found
    load_config(write(tmp_path), ["trainer.grad_offload=true"])  # the torch engine offloads them


PARALLEL = {
    "tensor_parallel_size": 2,
    "data_parallel_size": 2,
    "pipeline_parallel_size": 2,
    "enable_expert_parallel": True,
}
"""The rollout model's keys that spread one engine over several GPUs, each off its default."""


def test_engine_parallel_keys_reach_vllm_s_engines_and_other_engines_refuse_them(tmp_path, caplog):
    """vLLM takes them (its engine arguments: tests/vllm_engine/test_vllm_args.py) and its engines ask
    tensor x data x pipeline GPUs; the transformers engine holds a model on one device: refused by name.
    The defaults, which Trinity-RFT's examples write, pass silently with every engine."""
    overrides = [f"explorer.rollout_model.{key}={value}" for key, value in PARALLEL.items()]
    found = issues_of(write(tmp_path), overrides)
    for key in PARALLEL:
        assert found[f"explorer.rollout_model.{key}"].startswith(
            "engine_type 'transformers' does not spread one engine over several GPUs: leave it at its default"
        )
    load_config(write(tmp_path), ["explorer.rollout_model.data_parallel_size=1"])
    assert "data_parallel_size" not in caplog.text
    gpus = ["cluster.gpu_per_node=16", "explorer.rollout_model.engine_type=vllm"]
    cfg = load_config(write(tmp_path), [*gpus, *overrides])
    assert cfg.explorer.rollout_model.gpu_per_engine == cfg.cluster.explorer_gpu_num == 8  # 2 x 2 x 2


def test_nccl_sync_numbers_tensor_parallel_ranks_only(tmp_path):
    """Its group counts each engine's tensor-parallel workers: data or pipeline parallel engines sync
    by memory or checkpoint (the default then), and nccl named for them is refused."""
    base = ["cluster.gpu_per_node=4", "explorer.rollout_model.engine_type=vllm", "trainer.trainer_type=verl"]
    assert load_config(write(tmp_path), base).synchronizer.sync_method == "nccl"
    pipeline = [*base, "explorer.rollout_model.pipeline_parallel_size=2"]
    assert load_config(write(tmp_path), pipeline).synchronizer.sync_method == "memory"
    found = issues_of(write(tmp_path), [*pipeline, "synchronizer.sync_method=nccl"])
    assert found["synchronizer.sync_method"] == (
        "'nccl' numbers each engine's tensor-parallel workers only, and explorer.rollout_model has "
        "data_parallel_size 1 x pipeline_parallel_size 2: use memory (mode both) or checkpoint"
    )


@pytest.mark.parametrize(
    "key, value",
    [
        ("tensor_model_parallel_size", 2),
        ("pipeline_model_parallel_size", 2),
        ("virtual_pipeline_model_parallel_size", 2),
        ("expert_model_parallel_size", 2),
        ("expert_tensor_parallel_size", 1),
        ("context_parallel_size", 2),
        ("sequence_parallel", False),
    ],
)
def test_megatron_parallel_keys_off_their_defaults_are_refused_naming_fsdp(tmp_path, key, value):
    found = issues_of(write(tmp_path), [f"trainer.megatron.{key}={value}"])
    assert list(found) == [f"trainer.megatron.{key}"]
    assert "use FSDP (trainer_strategy fsdp or fsdp2)" in found[f"trainer.megatron.{key}"]


def test_megatron_parallel_keys_at_their_defaults_pass_silently(tmp_path, caplog):
    load_config(
        write(tmp_path), ["trainer.megatron.tensor_model_parallel_size=1", "trainer.megatron.sequence_parallel=true"]
    )
    assert "megatron" not in caplog.text

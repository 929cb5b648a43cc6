"""Every rule of ``trinity/config/check.py``, one bad config each, with the key it must name.

A rule removed (or one that stops naming its key) fails its case here. Each case is a config
built from the small valid base (``config_helpers.BASE``) with YAML overrides, and, where a
rule can only be reached by a config the derivation would not leave (a taskset with no workflow
at any level while trinity-workflows names a default), a change to the derived config before
the check runs. ``test_every_rule_of_the_checker_has_a_case`` counts the checker's reports so
that a new rule comes with its case.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from config_helpers import write

import trinity.config.check as check_module
from trinity.config.derive import derive_config
from trinity.config.load import IssueCollector, parse_config, read_yaml
from trinity.config.schema import Config

TASKSET = "buffer.explorer_input.taskset"
GPUS = ["cluster.gpu_per_node=1"]
RUNTIME_LORA = [
    "model.lora_configs=[{name: policy, lora_rank: 8}]",
    "explorer.rollout_model.enable_runtime_lora_updating=true",
]


@dataclass
class Rule:
    """A bad config and what the check must report: ``kind`` (error, warning, at_run: a warning at
    check and an error at run, inert: no effect) under ``key``, its message containing ``says``."""

    id: str
    overrides: list[str]
    kind: str
    key: str
    says: str
    extra: str = ""
    derived: Callable[[Config, Path], None] | None = None
    """Applied to the derived config before the check."""
    patch: dict[str, Any] = field(default_factory=dict)
    """Attributes of ``trinity.config.check`` replaced for the case."""
    run: bool = False
    """Checked as ``trinity run`` checks (importing the dotted paths the config names)."""


def _no_workflow(config: Config, _: Path) -> None:
    config.buffer.explorer_input.tasksets[0].default_workflow_type = None


def _lora_folder(config: Config, tmp_path: Path) -> None:
    config.model.lora_configs[0].path = str(tmp_path)  # a folder without adapter_config.json


_FIND_SPEC = importlib.util.find_spec


def _no_data_juicer(name: str, *args: Any) -> Any:
    return None if name == "data_juicer" else _FIND_SPEC(name, *args)


RULES = [
    # check_monitor
    Rule("monitor-args-read-by-none", ["monitor.monitor_args={nothing_reads_this: 1}"], "inert",
         "monitor.monitor_args.nothing_reads_this", "no monitor of tensorboard reads it"),
    # plugin_ok, resolved_plugin (every plugin field; see also test_check_imports_nothing.py)
    Rule("dotted-path-left-to-the-run", [f"{TASKSET}.default_workflow_type=json.decoder.JSONDecoder",
                                         f"{TASKSET}.workflow_args={{a: 1}}"],
         "warning", f"{TASKSET}.default_workflow_type", "is a dotted path: not imported by the check"),
    Rule("plugin-that-does-not-import", [f"{TASKSET}.default_workflow_type=json.NoSuchWorkflow",
                                         f"{TASKSET}.workflow_args={{a: 1}}"],
         "error", f"{TASKSET}.default_workflow_type", "cannot be imported: AttributeError", run=True),
    # check_algorithm
    Rule("group-algorithm-one-rollout", ["algorithm.repeat_times=1"], "error", "algorithm.repeat_times",
         "every advantage would be 0"),
    Rule("unknown-algorithm-still-checks-fns", ["algorithm.algorithm_type=nope", "algorithm.advantage_fn=grpoo"],
         "error", "algorithm.advantage_fn", "unknown advantage function 'grpoo'"),
    # check_router_replay
    Rule("router-replay-trainer", ["algorithm.enable_router_replay=true", "trainer.trainer_type=verl"], "error",
         "algorithm.enable_router_replay", "trainer.trainer_type 'verl' replays no MoE routing"),
    Rule("router-replay-rollout", ["algorithm.enable_router_replay=true", "explorer.rollout_model.engine_type=vllm"],
         "error", "algorithm.enable_router_replay", "engine_type 'vllm' records no MoE routing"),
    # check_rollout_correction
    Rule("rs-without-threshold", ["algorithm.rollout_correction={rollout_rs: token_k1}"], "error",
         "algorithm.rollout_correction.rollout_rs_threshold", "needs a threshold"),
    Rule("rs-bad-threshold", ["algorithm.rollout_correction={rollout_rs: token_k1, rollout_rs_threshold: 'abc'}"],
         "error", "algorithm.rollout_correction.rollout_rs_threshold", "bad threshold 'abc' for token_k1"),
    Rule("bypass-ppo-clip-is", ["algorithm.rollout_correction={rollout_is: token, bypass_mode: true}"], "warning",
         "algorithm.rollout_correction.rollout_is", "the importance weights are only logged"),
    # check_tinker
    Rule("tinker-enable", ["model.tinker.enable=true"], "at_run", "model.tinker.enable",
         "every engine_type become tinker"),
    Rule("tinker-key", ["model.tinker.rank=8"], "at_run", "model.tinker.rank", "hosted Tinker service"),
    # check_model
    Rule("external-model-not-bench", ["model.external_model.enable=true"], "error", "model.external_model.enable",
         "evaluated in mode bench"),
    Rule("no-model-path", ["model.model_path=''"], "error", "model.model_path", "the path (or hub id)"),
    Rule("auxiliary-without-model-path", ["explorer.auxiliary_models=[{engine_type: transformers}]"], "error",
         "explorer.auxiliary_models[0].model_path", "required for an auxiliary model"),
    Rule("use-v1-false", ["explorer.rollout_model.use_v1=false"], "at_run", "explorer.rollout_model.use_v1",
         "V0 engine"),
    Rule("prompt-and-response-over-the-limit", ["model.max_model_len=80"], "error", "model.max_model_len",
         "exceeds max_model_len 80"),
    Rule("auxiliary-over-its-limit",
         ["explorer.auxiliary_models=[{model_path: /m, engine_type: transformers, max_model_len: 80, "
          "max_prompt_tokens: 64, max_response_tokens: 32}]"],
         "at_run", "explorer.auxiliary_models[0].max_model_len", "exceeds max_model_len 80"),
    Rule("min-response-over-max", ["model.min_response_tokens=40"], "error", "model.min_response_tokens",
         "is more than max_response_tokens 32"),
    # check_lora
    Rule("two-adapters", ["model.lora_configs=[{lora_rank: 8}, {lora_rank: 8}]"], "error", "model.lora_configs",
         "one is supported"),
    Rule("rank-zero", ["model.lora_configs=[{lora_rank: 0}]"], "error", "model.lora_configs[0].lora_rank",
         "trains no adapter"),
    Rule("not-a-peft-folder", ["model.lora_configs=[{lora_rank: 8}]"], "error", "model.lora_configs[0].path",
         "not a peft adapter folder", derived=_lora_folder),
    Rule("vllm-only-lora-key", ["model.lora_configs=[{lora_rank: 8}]", "model.fully_sharded_loras=true"], "inert",
         "model.fully_sharded_loras", "read by the vLLM engine only"),
    Rule("lora-on-no-side", ["mode=explore", "model.lora_configs=[{lora_rank: 8}]",
                             "explorer.rollout_model.engine_type=external"],
         "inert", "model.lora_configs", "takes no LoRA adapter yet ('transformers' does): the full model trains"),
    Rule("lora-on-one-side-only", ["model.lora_configs=[{lora_rank: 8}]", "explorer.rollout_model.engine_type=external"],
         "error", "explorer.rollout_model.engine_type",
         "takes no LoRA adapter (model.lora_configs) yet, and the other engine does"),
    # check_runtime_lora
    Rule("runtime-lora-on-an-auxiliary-model",
         ["explorer.auxiliary_models=[{model_path: /m, engine_type: transformers, enable_runtime_lora_updating: true}]"],
         "inert", "explorer.auxiliary_models[0].enable_runtime_lora_updating", "is the rollout model's only"),
    Rule("runtime-lora-without-an-adapter", ["explorer.rollout_model.enable_runtime_lora_updating=true"], "inert",
         "explorer.rollout_model.enable_runtime_lora_updating", "the rollout model holds none"),
    Rule("runtime-lora-on-another-engine", [*RUNTIME_LORA, "explorer.rollout_model.enable_openai_api=true"], "inert",
         "explorer.rollout_model.enable_runtime_lora_updating",
         "read by the vLLM engine only (explorer.rollout_model.engine_type is 'transformers')"),
    Rule("runtime-lora-without-an-endpoint", [*RUNTIME_LORA, "explorer.rollout_model.engine_type=vllm"], "inert",
         "explorer.rollout_model.enable_runtime_lora_updating", "set explorer.rollout_model.enable_openai_api"),
    # check_cluster
    Rule("no-gpu-left-for-the-trainer", GPUS, "error", "explorer.rollout_model.engine_num",
         "no GPU left for the trainer"),
    Rule("not-enough-gpus", [*GPUS, "mode=explore", "explorer.rollout_model.engine_num=2"], "error",
         "explorer.rollout_model.engine_num", "not enough GPUs"),
    Rule("colocate-on-two-gpus", ["cluster.gpu_per_node=2", "mode=colocate"], "error", "mode",
         "colocate shares one GPU"),
    Rule("single-process-joining-a-cluster", ["cluster.single_process=true", "cluster.ray_address=10.0.0.1:6379"],
         "error", "cluster.single_process", "joins no Ray cluster (cluster.ray_address is '10.0.0.1:6379'"),
    Rule("trainer-not-whole-nodes", ["cluster.node_num=2", "cluster.gpu_per_node=4", "explorer.rollout_model.engine_num=3"],
         "error", "cluster", "the trainer must get whole nodes"),
    # check_synchronizer
    Rule("fully-async-evaluates-nothing",
         ["synchronizer.sync_style=fully_async", "buffer.explorer_input.eval_tasksets=[{path: /e.jsonl}]"], "error",
         "buffer.explorer_input.eval_tasksets", "does not evaluate"),
    Rule("partial-rollout-without-loads-in-flight", ["synchronizer.partial_rollout=true"], "error",
         "synchronizer.partial_rollout", "sync_style 'fixed' loads weights only when no generation is in flight"),
    Rule("partial-rollout-on-an-engine-that-cannot-pause",
         ["synchronizer.sync_style=fully_async", "synchronizer.partial_rollout=true",
          "explorer.rollout_model.engine_type=external", "explorer.rollout_model.base_url=http://127.0.0.1:1/v1"],
         "error", "synchronizer.partial_rollout", "engine_type 'external' cannot pause its generations"),
    # check_explorer, _check_engine_parallelism, check_doors
    Rule("engine-parallel-key-of-an-engine-that-spreads-none", ["explorer.rollout_model.pipeline_parallel_size=2"],
         "error", "explorer.rollout_model.pipeline_parallel_size",
         "engine_type 'transformers' does not spread one engine over several GPUs"),
    Rule("over-rollout-with-fixed-sync", ["explorer.over_rollout.ratio=0.5"], "error", "explorer.over_rollout",
         "does not work with sync_style fixed"),
    Rule("open-serve-proxy", ["mode=serve", "explorer.listen_address=0.0.0.0"], "error", "explorer.listen_address",
         "opens the serve proxy to other hosts"),
    Rule("open-openai-endpoint",
         ["explorer.rollout_model.enable_openai_api=true", "explorer.rollout_model.openai_api_host=0.0.0.0"],
         "error", "explorer.rollout_model.openai_api_host", "opens the OpenAI endpoint to other hosts"),
    # check_buffer, _check_taskset
    Rule("explores-without-a-taskset", ["buffer.explorer_input.taskset=null", "mode=explore"], "error",
         "buffer.explorer_input.tasksets", "explores: give a taskset"),
    Rule("taskset-names-twice",
         ["buffer.explorer_input.eval_tasksets=[{name: e, path: /e.jsonl}, {name: e, path: /f.jsonl}]"], "error",
         "buffer.explorer_input.eval_tasksets[1].name", "names must be unique"),
    Rule("taskset-without-path", [f"{TASKSET}.path=null"], "at_run", f"{TASKSET}.path",
         "required: the file, folder or dataset of the tasks"),
    Rule("file-tasksets-without-path", ["buffer.explorer_input.taskset=null",
                                        "buffer.explorer_input.tasksets=[{storage_type: file}]"],
         "at_run", "buffer.explorer_input.tasksets[0].path", "required: the file, folder or dataset of the tasks"),
    Rule("no-workflow-at-any-level", [], "error", f"{TASKSET}.default_workflow_type", "no workflow at any level",
         derived=_no_workflow),
    # _check_experience_buffer, _check_trust_pickled_rows, _check_replay_buffer
    Rule("auxiliary-buffer-without-path", ["buffer.trainer_input.auxiliary_buffers={sft: {schema_type: sft}}"],
         "error", "buffer.trainer_input.auxiliary_buffers.sft.path", "required: the data of the auxiliary buffer"),
    Rule("auxiliary-buffer-not-sft", ["buffer.trainer_input.auxiliary_buffers={d: {path: /d.jsonl, schema_type: dpo}}"],
         "inert", "buffer.trainer_input.auxiliary_buffers.d.schema_type", "read as SFT data, not dpo"),
    Rule("trust-pickled-rows-in-memory", ["buffer.trainer_input.experience_buffer.trust_pickled_rows=true"], "inert",
         "buffer.trainer_input.experience_buffer.trust_pickled_rows", "only a database holds pickled rows"),
    Rule("replay-setting-while-off", ["buffer.trainer_input.experience_buffer.replay_buffer={reuse_cooldown_time: 5}"],
         "inert", "buffer.trainer_input.experience_buffer.replay_buffer.reuse_cooldown_time",
         "replay_buffer.enable is false"),
    Rule("replay-without-a-queue",
         ["mode=train", "buffer.trainer_input.experience_buffer={storage_type: file, path: /x.jsonl, "
          "replay_buffer: {enable: true}}"],
         "inert", "buffer.trainer_input.experience_buffer.replay_buffer.enable", "needs storage_type queue, not file"),
    # check_trainer, _check_expert_buffer
    Rule("grad-offload-without-it", ["trainer.trainer_type=verl", "trainer.grad_offload=true"], "error",
         "trainer.grad_offload", "offloads no gradients of its own"),
    Rule("critic-warmup-without-critic", ["trainer.critic_warmup=2"], "warning", "trainer.critic_warmup",
         "has no critic to warm up"),
    Rule("megatron", ["trainer.trainer_strategy=megatron"], "error", "trainer.trainer_strategy",
         "megatron is not available"),
    Rule("megatron-parallelism", ["trainer.megatron.context_parallel_size=2"], "error",
         "trainer.megatron.context_parallel_size", "use FSDP (trainer_strategy fsdp or fsdp2)"),
    Rule("micro-batch-below-max-model-len", ["trainer.max_token_len_per_gpu=64"], "warning",
         "trainer.max_token_len_per_gpu", "a full-length sample will not fit a micro-batch"),
    Rule("mix-without-expert-buffer", ["algorithm.algorithm_type=mix"], "error",
         "buffer.trainer_input.auxiliary_buffers", "reads expert data from the auxiliary buffer"),
    Rule("mix-reads-fewer-rollouts-than-written",
         ["algorithm.algorithm_type=mix", "algorithm.repeat_times=8", "buffer.batch_size=16",
          "buffer.trainer_input.auxiliary_buffers={sft_dataset: {name: sft_dataset, path: /t.jsonl}}"],
         "warning", "buffer.train_batch_size", "read 64 of the 128 rollouts the explorer writes a step"),
    # check_data_processor
    Rule("unknown-operator", ["data_processor.experience_pipeline.operators=[{name: nope_operator}]"], "error",
         "data_processor.experience_pipeline.operators[0].name", "nope_operator"),
    Rule("task-pipeline-without-data-juicer",
         ["data_processor.task_pipeline={inputs: [/t.jsonl], operators: [{name: text_length_filter}]}"],
         "error", "data_processor.task_pipeline", "needs Data-Juicer", patch={"importlib": None}),
    # check_stages
    Rule("stage-without-name", [], "error", "stages[0].stage_name", "required: it names the stage's checkpoint",
         extra="stages: [{mode: both}]\n"),
    Rule("stage-named-twice", [], "error", "stages[1].stage_name", "'one' is used twice",
         extra="stages: [{stage_name: one}, {stage_name: one}]\n"),
    Rule("stage-section-checked", [], "error", "stages[0].buffer.batch_size", "",
         extra="stages: [{stage_name: one, buffer: {batch_size: abc}}]\n"),
]  # fmt: skip


def reported(rule: Rule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """``{kind: ["key: message", ...]}`` of the check of ``rule``'s config."""
    if "importlib" in rule.patch:
        monkeypatch.setattr(check_module.importlib.util, "find_spec", _no_data_juicer)
    issues = IssueCollector()
    with check_module.importing_dotted_paths(rule.run):
        config = parse_config(read_yaml(write(tmp_path, rule.extra), rule.overrides), issues)
        derive_config(config, issues)
        if rule.derived:
            rule.derived(config, tmp_path)
        check_module.check_config(config, issues)
    lists = {"error": issues.issues, "warning": issues.warnings, "at_run": issues.at_run, "inert": issues.inert}
    return {kind: [str(issue) for issue in found] for kind, found in lists.items()}


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_names_its_key(rule, tmp_path, monkeypatch):
    found = reported(rule, tmp_path, monkeypatch)
    matches = [line for line in found[rule.kind] if line.startswith(f"{rule.key}: ") and rule.says in line]
    assert matches, f"{rule.id}: no {rule.kind} '{rule.key}: ...{rule.says}...' in {found}"


def test_the_base_config_breaks_no_rule(tmp_path, monkeypatch):
    found = reported(Rule("base", [], "error", "", ""), tmp_path, monkeypatch)
    assert found["error"] == [] and found["at_run"] == [], found


def test_vllm_serves_the_adapter_on_its_endpoint_only_with_runtime_lora_updating(tmp_path, monkeypatch):
    """vLLM's OpenAI server with an adapter is refused unless ``enable_runtime_lora_updating`` serves the
    adapter on it (trinity-vllm's check), the message naming the key and the adapter's name; with it, the
    config is accepted without a word about the key."""
    vllm_endpoint = [
        *RUNTIME_LORA,
        "explorer.rollout_model.engine_type=vllm",
        "explorer.rollout_model.enable_openai_api=true",
    ]
    served = reported(Rule("served", vllm_endpoint, "error", "", ""), tmp_path, monkeypatch)
    assert served["error"] == [] and served["at_run"] == [], served
    assert not [line for line in served["inert"] + served["warning"] if "lora" in line.lower()], served
    off_rule = Rule(
        "off", [*vllm_endpoint, "explorer.rollout_model.enable_runtime_lora_updating=false"], "error", "", ""
    )
    off = reported(off_rule, tmp_path, monkeypatch)
    assert off["error"] == [
        "explorer.rollout_model.enable_openai_api: vLLM's OpenAI server would answer with the base model, not the "
        "trained LoRA adapter: set explorer.rollout_model.enable_runtime_lora_updating: true to serve each synced "
        "version of the adapter as model 'policy', or drop model.lora_configs"
    ]


REPORTS = re.compile(r"issues\.(add|warn|refuse_at_run|no_effect)\(|\(over_the_limit or issues\.add\)\(")
"""A place in check.py that reports an issue."""

CHECKER_REPORTS = 56
"""Places in check.py that report an issue when the cases above were written: each is caught by a
case (a report disabled in memory, one at a time, fails at least one case)."""


def test_every_rule_of_the_checker_has_a_case():
    """A new report in check.py without a case here fails this count: add the case, then the number."""
    sites = len(REPORTS.findall(Path(check_module.__file__).read_text()))
    assert sites == CHECKER_REPORTS, f"check.py reports at {sites} places; the cases were written for {CHECKER_REPORTS}"


def test_a_file_taskset_without_path_warns_at_check_and_trinity_run_refuses_it(tmp_path):
    """README: what only a run cannot do (a taskset without ``path``) is a warning at ``trinity config
    check``, naming the key, an error under ``--strict`` and at ``trinity run``."""
    path = write(tmp_path)
    overrides = ["buffer.explorer_input.taskset=null", "buffer.explorer_input.tasksets=[{storage_type: file}]"]
    key = "buffer.explorer_input.tasksets[0].path"

    def check(*flags: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "trinity.cli", "config", "check", *flags, str(path), *overrides]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    checked = check()
    assert checked.returncode == 0, checked.stderr
    assert f"{key}: required: the file, folder or dataset of the tasks" in checked.stderr
    assert "(trinity run refuses it)" in checked.stderr
    strict = check("--strict")
    assert strict.returncode == 2 and key in strict.stderr
    from trinity.config import ConfigError
    from trinity.launcher import run

    with pytest.raises(ConfigError) as err:  # the run command's own door, before Ray starts
        run(str(path), overrides)
    assert [issue.path for issue in err.value.issues] == [key]

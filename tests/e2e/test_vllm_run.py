"""The quickstart end to end with ``engine_type: vllm`` (vllm-cpu): explorer, trainer, weights in memory or by nccl."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from e2e_helpers import EXPLORE_ONLY, frozen_at, trinity_run, trinity_start, write_experiment
from test_run import JOB, assert_ok, job_log, metrics
from test_tool_call_run import check_tool_call_run, tool_call_experiment

from helpers.ray_cluster import ray_head, ray_worker
from trinity.common.files import read_json
from trinity.report import SUMMARY_FILE

pytest.importorskip("vllm")

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, for the runs' engines
VLLM = ("explorer.rollout_model.engine_type=vllm", "explorer.rollout_model.enforce_eager=true")
SMALL = ("buffer.batch_size=4", "algorithm.repeat_times=4")
VERDICT = "Score: 7"


def test_a_single_process_run_refuses_the_vllm_engine_naming_its_key(tmp_path, tiny_model_dir, arithmetic_data):
    """vLLM's engines are Ray actors of their own: ``cluster.single_process`` is refused before
    anything starts, naming the engine's key and what to use instead."""
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, *VLLM, "cluster.single_process=true")
    result = trinity_run(config, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "cluster.single_process: a single-process run has no Ray, so" in result.stderr
    assert "explorer.rollout_model.engine_type 'vllm' starts Ray actors of its own (use transformers)" in result.stderr


def train_judge(model_dir: Path, out: Path) -> Path:
    """A copy of the tiny model taught to answer any judge prompt with ``VERDICT``: a random
    model gives no score, and a judge reward of 0.7 can only come from this model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trinity_workflows.judge import JUDGE_PROMPT

    shutil.copytree(model_dir, out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    rng = random.Random(0)
    prompts = []
    for _ in range(4):
        a, b = rng.randrange(5), rng.randrange(5)
        text = JUDGE_PROMPT.format(
            question=f"{a}+{b}=",
            reference=f"\n# Reference answer\n{a + b}\n",
            rubric="Award 10 for the right sum.",
            response=tokenizer.decode([rng.randrange(300) for _ in range(6)]),
            max_score="10",
        )
        messages = [{"role": "user", "content": text}]
        prompts.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))
    target = [*tokenizer(VERDICT)["input_ids"], tokenizer.eos_token_id]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(20):  # the loss is below 0.01 after 10 rounds
        for ids in prompts:
            labels = torch.tensor([[-100] * len(ids) + target])
            model(torch.tensor([ids + target]), labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.save_pretrained(out)
    return out


@pytest.mark.slow
def test_nccl_sync_reaches_a_vllm_engine_on_another_node(tmp_path, tiny_model_dir, arithmetic_data):
    """Two nodes of one logical GPU each, started as docs/multinode.md says: the trainer's GPU is
    on one, so the vLLM engine's (a Ray actor asking for one GPU) is the other node's; every
    step's weights cross by broadcast into vLLM's worker (nccl's process group, gloo on a CPU).
    Through Ray's object store (memory sync) they reach vLLM in
    tests/learning/test_engine_learning.py, where GRPO on vLLM learns and fails with the weights
    not synced; on one node by nccl in the crash test below."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VLLM,
        *SMALL,
        "synchronizer.sync_method=nccl",
        "buffer.total_steps=3",
    )
    with ray_head("--num-gpus=1", "--node-name=head") as address, ray_worker(address, "worker1", "--num-gpus=1"):
        result = trinity_run(config, "cluster.node_num=2", "cluster.gpu_per_node=1", f"cluster.ray_address={address}")
    assert_ok(result)
    trainer = read_json(tmp_path / JOB / SUMMARY_FILE)["placement"]["trainer"]
    assert trainer["node"] in ("head", "worker1") and len(trainer["gpu_ids"]) == 1
    assert [r["rollout/experience_count"] for r in metrics(tmp_path, "explorer")] == [16, 16, 16]
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2, 3]
    output = job_log(tmp_path)  # version 3 is published after the explorer's last step: never asked for
    assert "nccl sync: version 2 broadcast" in output and "nccl sync: version 2 received" in output
    assert "weights of version 2 loaded" in output


@pytest.mark.slow
def test_an_llm_judge_on_a_vllm_auxiliary_model_scores_the_rollouts(tmp_path, tiny_model_dir, arithmetic_data):
    """The rubric judge workflow with its judge (``explorer.auxiliary_models[0]``) on a vLLM
    engine beside the rollout model's (transformers: one vLLM start fewer): every rollout gets
    the judge's score as reward."""
    judge = train_judge(tiny_model_dir, tmp_path / "judge")
    workflow_args = (
        "{rubric: Award 10 for the right sum., judge_retries: 0, judge_sampling: {temperature: 0.0, max_tokens: 8}}"
    )
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *SMALL,
        *EXPLORE_ONLY,
        "buffer.total_steps=1",
        "buffer.explorer_input.default_workflow_type=rubric_judge_workflow",
        f"buffer.explorer_input.taskset.workflow_args={workflow_args}",
        f"explorer.auxiliary_models=[{{model_path: {judge}, engine_type: vllm, enforce_eager: true, "
        "max_model_len: 1024, max_prompt_tokens: 1000, max_response_tokens: 16}]",
    )
    result = trinity_run(config)
    assert_ok(result)
    (step,) = metrics(tmp_path, "explorer")
    assert step["rollout/experience_count"] == 16 and step["rollout/failed_tasks"] == 0
    judged = [
        step[key] for key in ("rollout/judge/min", "rollout/judge/max", "rollout/reward/min", "rollout/reward/max")
    ]
    assert judged == pytest.approx([0.7] * 4)


def _command_line(process) -> str:
    """A process's command line; empty for one that exited meanwhile (a zombie not yet reaped)."""
    import psutil

    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""


def kill_the_vllm_server_after_two_steps(config: Path) -> tuple[subprocess.Popen, str]:
    """Start ``trinity run``, kill its vLLM engine's process while the explorer stands frozen
    after its second step (SIGSTOP at the ``explorer.after_meta`` crash point: the tiny model's
    steps take 0.05 s, so a run left going could end before the kill), let the explorer go on,
    and wait for the run's end: the run and its output."""
    import psutil

    frozen = frozen_at("explorer.after_meta:2")
    run = trinity_start(config, env=frozen, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while True:
        assert run.poll() is None and time.monotonic() < deadline, "the explorer never finished two steps"
        processes = psutil.Process(run.pid).children(recursive=True)
        explorers = [p for p in processes if "ExplorerRole" in _command_line(p)]
        if explorers and all(_stopped(p) for p in explorers):
            break
        time.sleep(0.2)
    (server,) = [p for p in processes if "VLLMServer" in _command_line(p)]
    server.kill()
    server.wait(timeout=60)
    for explorer in explorers:
        explorer.send_signal(signal.SIGCONT)
    output, _ = run.communicate(timeout=300)
    return run, output


def _stopped(process) -> bool:
    import psutil

    try:
        return process.status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_a_crashed_vllm_engine_is_restarted_and_the_run_loses_nothing(tmp_path, tiny_model_dir, arithmetic_data):
    """The engine's actor is killed mid-run: the explorer restarts it, runs the batch it was in
    again, and finishes every step; the buffer holds each step's experiences exactly once."""
    steps = 12  # the kill comes after two steps: ten more run after the restart
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VLLM,
        *SMALL,
        *EXPLORE_ONLY,
        f"buffer.total_steps={steps}",
    )
    run, output = kill_the_vllm_server_after_two_steps(config)
    assert run.returncode == 0, output[-4000:]
    assert len(metrics(tmp_path, "explorer")) == steps, output[-3000:]
    assert re.search(r"vllm engine .*Ray actor died .*; restarting it \(restart 1 of 3\)", output), output[-3000:]
    with sqlite3.connect(tmp_path / JOB / "buffer" / "experience_buffer.db") as db:
        assert db.execute("select count(*) from experience_buffer_exp").fetchone()[0] == 16 * steps


@pytest.mark.slow
def test_with_nccl_sync_a_crashed_vllm_engine_ends_the_run_naming_why(tmp_path, tiny_model_dir, arithmetic_data):
    """nccl's process group cannot take in a restarted engine: the crash ends the run naming the
    engine, and where it hit a rollout, that it was not restarted and why."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VLLM,
        *SMALL,
        "synchronizer.sync_method=nccl",
        "buffer.total_steps=400",
    )
    run, output = kill_the_vllm_server_after_two_steps(config)
    assert run.returncode == 1, output[-4000:]
    assert "nccl sync: version 1 received" in job_log(tmp_path), output[-3000:]  # the second step's weights
    failure = re.search(r"explorer failed: (EngineCrashed|NCCLSyncError): .*vllm engine .*Ray actor died.*", output)
    assert failure, output[-3000:]
    if failure[1] == "EngineCrashed":  # killed during a rollout; else during a broadcast, which fails the sync itself
        assert "(not restarted: sync_method 'nccl' cannot feed a restarted engine)" in failure[0], failure[0]


@pytest.mark.slow
def test_tool_call_workflow_trains_with_the_vllm_engine(tmp_path, tool_model_dir):
    """``test_tool_call_run``'s multi-turn tool-calling run with ``engine_type: vllm``: the vLLM
    engine renders the tools and re-tokenises the conversations with the same ``ChatTokenizer``,
    so the experiences carry the same masks."""
    config = tool_call_experiment(tmp_path, tool_model_dir, engine="vllm")
    assert_ok(trinity_run(config, "explorer.rollout_model.enforce_eager=true", "synchronizer.sync_method=memory"))
    check_tool_call_run(tmp_path, tool_model_dir, steps=2)

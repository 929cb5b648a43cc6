"""``mode: serve``: an agent written with nothing but the official ``openai`` package chats with the
proxy, scores its responses, commits them, and a ``mode: train`` process trains on exactly
those experiences while the proxy takes the new weights and goes on serving."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import openai
import pytest
from e2e_helpers import trinity_run, trinity_start, write_experiment
from test_run import assert_ok
from test_run import metrics as role_metrics

from helpers.ports import free_port
from trinity.rollout.openai_api import MAX_N

TASKS = {"task-a": 1.0, "task-b": 0.0, "task-c": 0.5}
KEY = "serve-secret"


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()[-3000:] if process.stdout else "serve exited"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError("the serve proxy never answered /health")


def test_an_openai_agent_feeds_a_trainer_through_serve_mode(tmp_path, tiny_model_dir, arithmetic_data):
    """The proxy requires its key, refuses bad feedback whole (nothing scored), and a commit goes
    through the experience pipeline: ``reward_filter`` keeps task-b's rewards of 0 out of the buffer."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    common = (
        "algorithm.repeat_times=2",
        "synchronizer.sync_method=checkpoint",
        "buffer.train_batch_size=4",
        f"explorer.rollout_model.api_key={KEY}",
        "data_processor.experience_pipeline.operators=[{name: reward_filter, args: {threshold: 0.25}}]",
    )
    serve = write_experiment(
        tmp_path / "s",
        tiny_model_dir,
        arithmetic_data,
        "mode=serve",
        f"explorer.proxy_port={port}",
        "explorer.service_status_check_interval=4",  # newer weights looked for every 2 s
        *common,
    )
    server = trinity_start(serve, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(url, server)  # /health needs no key
        stranger = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            stranger.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1+1="}])
        assert httpx.post(f"{url}/commit").status_code == 401
        agent = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError, match=f"n: Input should be less than or equal to {MAX_N}"):
            agent.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1+1="}], n=MAX_N + 1)
        ids: dict[str, list[str]] = {}
        for task in TASKS:
            for _ in range(2):  # two attempts of each task: its group
                reply = agent.chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": f"{task}: 2+3="}], max_tokens=8
                )
                assert reply.choices[0].message.content is not None
                ids.setdefault(task, []).append(reply.id)
        proxy = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"})
        first = ids["task-a"][0]
        for reward in (b"NaN", b"Infinity", b"-Infinity", b"1e7"):  # 1e7: beyond MAX_ABS_REWARD, float32 overflows
            body = b'{"reward": %s, "msg_ids": ["%s"]}' % (reward, first.encode())
            answer = proxy.post("/feedback", content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == 422 and "reward" in answer.json()["error"]["message"], answer.text
        doubled = proxy.post("/feedback", json={"reward": 1.0, "msg_ids": [first, first]})
        assert doubled.status_code == 400 and first in doubled.json()["error"]["message"]
        partly_unknown = proxy.post("/feedback", json={"reward": 1.0, "msg_ids": [first, "chatcmpl-nope"]})
        assert partly_unknown.status_code == 404 and "chatcmpl-nope" in partly_unknown.json()["error"]["message"]
        assert proxy.get("/metrics").json()["ready_experiences"] == 0  # all or nothing: none scored
        for task, reward in TASKS.items():
            answer = proxy.post("/feedback", json={"reward": reward, "msg_ids": ids[task], "task_id": task})
            assert answer.status_code == 200, answer.text
        twice = proxy.post("/feedback", json={"reward": 1.0, "msg_ids": ids["task-a"][:1]})
        assert twice.status_code == 409 and ids["task-a"][0] in twice.json()["error"]["message"]
        unknown = proxy.post("/feedback", json={"reward": 1.0, "msg_ids": ["chatcmpl-nope"]})
        assert unknown.status_code == 404 and "chatcmpl-nope" in unknown.json()["error"]["message"]
        malformed = proxy.post("/feedback", json={"msg_ids": ids["task-b"]})
        assert malformed.status_code == 422 and "reward" in malformed.json()["error"]["message"]
        committed = proxy.post("/commit").json()
        assert committed == {"status": "success", "committed": 4, "dropped": 2, "step": 1}
        empty = proxy.post("/commit").json()  # nothing scored since: no step
        assert empty == {"status": "success", "committed": 0, "dropped": 0, "step": 1}
        metrics = proxy.get("/metrics").json()
        assert (metrics["committed_experiences"], metrics["dropped_experiences"]) == (4, 2)

        # The trainer, a process of its own, on the same job: exactly the four committed experiences.
        train = write_experiment(tmp_path / "s", tiny_model_dir, arithmetic_data, "mode=train", *common)
        assert_ok(trinity_run(train, "buffer.total_steps=1"))
        (step,) = role_metrics(tmp_path / "s", "trainer")
        assert step["experience_count"] == 4
        assert abs(step["critic/score/mean"] - (TASKS["task-a"] + TASKS["task-c"]) / 2) < 1e-6

        # The proxy loads the trainer's weights and goes on serving.
        deadline = time.monotonic() + 60
        while proxy.get("/metrics").json()["model_version"] < 1:
            assert time.monotonic() < deadline, "the proxy never loaded the trainer's weights"
            time.sleep(0.5)
        assert agent.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1+1="}]).id
        server.terminate()  # SIGTERM ends a serving run cleanly
        output, _ = server.communicate(timeout=60)
        assert server.returncode == 0 and "stopped (SIGTERM)" in output, output[-3000:]
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=60)

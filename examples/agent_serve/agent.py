"""A tiny arithmetic agent that knows nothing of trinity: an `openai` client, a reward it computes
itself, and two HTTP calls to the proxy (`/feedback`, `/commit`).

    python examples/agent_serve/agent.py http://127.0.0.1:8010 TASKS.jsonl [--steps 5]

Each step it tries 4 tasks 4 times each, rewards a correct sum with 1, and commits the 16
scored replies: one trainer step of serve.yaml.
"""

from __future__ import annotations

import argparse
import json
import re

import httpx
import openai

ATTEMPTS, TASKS_PER_STEP = 4, 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("proxy")
    parser.add_argument("tasks")
    parser.add_argument("--steps", type=int, default=5)
    opts = parser.parse_args()
    tasks = [json.loads(line) for line in open(opts.tasks)]
    client = openai.OpenAI(base_url=f"{opts.proxy}/v1", api_key="EMPTY")
    for step in range(opts.steps):
        right = 0
        for offset in range(TASKS_PER_STEP):
            task = tasks[(step * TASKS_PER_STEP + offset) % len(tasks)]
            messages = [
                {"role": "system", "content": "Answer with the sum."},
                {"role": "user", "content": task["question"]},
            ]
            for attempt in range(ATTEMPTS):
                reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
                answer = re.search(r"-?\d+", reply.choices[0].message.content or "")
                reward = float(answer is not None and answer.group() == task["answer"])
                right += int(reward)
                feedback = {"reward": reward, "msg_ids": [reply.id], "task_id": f"{step}-{offset}", "run_id": attempt}
                httpx.post(f"{opts.proxy}/feedback", json=feedback).raise_for_status()
        committed = httpx.post(f"{opts.proxy}/commit").raise_for_status().json()
        print(f"step {committed['step']}: committed {committed['committed']}, {right} of 16 right", flush=True)


if __name__ == "__main__":
    main()

"""MoE router replay in a whole ``trinity run``: the rollout engine's routing reaches the buffer
with every experience and the trainer's updates run on it (the mechanism and its effect on the
logprob gap: tests/model/test_router_replay.py)."""

from __future__ import annotations

from e2e_helpers import trinity_run, write_experiment, written_experiences
from test_run import assert_ok, metrics


def test_a_run_with_router_replay_stores_each_tokens_routing(tmp_path, tiny_moe_model_dir, arithmetic_data):
    config = write_experiment(
        tmp_path,
        tiny_moe_model_dir,
        arithmetic_data,
        "algorithm.enable_router_replay=true",
        "buffer.batch_size=4",
        "buffer.total_steps=2",
        "algorithm.repeat_times=2",
        "buffer.trainer_input.experience_buffer.storage_type=sql",  # read back below
        "trainer.save_interval=0",
    )
    assert_ok(trinity_run(config))
    experiences = written_experiences(tmp_path, 16, timeout=10)
    assert len(experiences) == 16
    for exp in experiences:
        routing = exp.routed_experts
        assert routing is not None and tuple(routing.shape) == (len(exp.tokens) - 1, 2, 2)  # 2 MoE layers, top-2
        assert 0 <= int(routing.min()) and int(routing.max()) < 8  # 8 experts
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2]

"""``trinity run`` with ``trainer.trainer_type: verl`` on a CPU: verl's FSDP2 workers in the
trainer actor (or in two rank actors), the tiny model, local Ray. Skipped where verl is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import trinity_run, write_experiment
from test_run import JOB, assert_ok, metrics

pytest.importorskip("verl")


def assert_verl_checkpoint(step_dir: Path, *roles: str, world: int = 1, hf_weights: bool = True) -> None:
    for role in roles:
        for rank in range(world):
            assert (step_dir / role / f"model_world_size_{world}_rank_{rank}.pt").is_file(), step_dir / role
            assert (step_dir / role / f"optim_world_size_{world}_rank_{rank}.pt").is_file()
    assert (step_dir / "actor" / "huggingface" / "config.json").is_file()
    assert bool(list((step_dir / "actor" / "huggingface").glob("*.safetensors"))) == hf_weights


@pytest.mark.slow
def test_sft_then_grpo_train_through_verl(tmp_path, tiny_model_dir, arithmetic_data):
    """The quickstart's two stages, shortened, on the verl engine: SFT lowers its loss, GRPO
    trains on rewarded rollouts and hands its weights back to the explorer."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "trainer.trainer_type=verl",
        "cluster.single_process=false",  # verl's ranks are Ray actors
        "stages.0.buffer.total_epochs=10",
        "buffer.total_steps=3",  # the GRPO stage's (it gives no buffer section: the global one is its)
        stages=True,
    )
    assert_ok(trinity_run(config))
    sft = metrics(tmp_path, "trainer", JOB / "sft_warmup")
    assert [r["step"] for r in sft] == list(range(1, 11))
    assert sft[-1]["actor/sft_loss"] < 0.75 * sft[0]["actor/sft_loss"]
    grpo = metrics(tmp_path, "trainer", JOB / "grpo")
    assert [r["step"] for r in grpo] == [1, 2, 3]
    assert any(r["actor/grad_norm"] > 0 for r in grpo)  # some group had differing rewards
    explorer = metrics(tmp_path, "explorer", JOB / "grpo")
    assert [r["step"] for r in explorer] == [1, 2, 3]
    assert_verl_checkpoint(tmp_path / JOB / "grpo" / "global_step_3", "actor")


def test_ppo_with_critic_on_two_ranks_trains_saves_and_resumes_through_verl(tmp_path, tiny_model_dir, arithmetic_data):
    """PPO on two trainer ranks (``cluster.gpu_per_node: 3``: one for the explorer's engine, two
    CPU processes for the trainer), a checkpoint every step, the actor's HF weights in the run's
    last checkpoint only (``trainer.save_hf_checkpoint: last``, the default)."""
    changes = ("trainer.trainer_type=verl", "algorithm.algorithm_type=ppo", "algorithm.repeat_times=2")
    changes += ("buffer.batch_size=4", "trainer.save_interval=1", "cluster.gpu_per_node=3")
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, *changes, "buffer.total_steps=2")
    assert_ok(trinity_run(config))
    first = metrics(tmp_path, "trainer")
    assert [r["step"] for r in first] == [1, 2]
    assert all("critic/vf_loss" in r and "actor/pg_loss" in r for r in first)  # rewards 0: no signal yet
    assert_verl_checkpoint(tmp_path / JOB / "global_step_1", "actor", "critic", world=2, hf_weights=False)
    assert_verl_checkpoint(tmp_path / JOB / "global_step_2", "actor", "critic", world=2)

    assert_ok(trinity_run(config, "buffer.total_steps=3", "continue_from_checkpoint=true"))
    resumed = metrics(tmp_path, "trainer")
    assert [r["step"] for r in resumed] == [1, 2, 3]  # step 3 continued from global_step_2
    assert_verl_checkpoint(tmp_path / JOB / "global_step_3", "actor", "critic", world=2)

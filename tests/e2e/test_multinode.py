"""Runs on a two-node Ray cluster with logical GPUs, started on this machine with the commands
docs/multinode.md gives for several: ``ray start --head`` and ``ray start --address`` (each node
its own raylet, two GPUs each). No GPU is needed: Ray hands out GPU ids and sets
``CUDA_VISIBLE_DEVICES`` all the same, and the roles compute on the CPU. A run's summary says
where each role ran."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from e2e_helpers import trinity_run, write_experiment

from helpers.ray_cluster import ray_head, ray_worker
from trinity.common.files import read_json
from trinity.monitor.console import read_jsonl
from trinity.report import SUMMARY_FILE

JOB = Path("ckpt") / "quickstart" / "arithmetic"
ONE_STEP = (
    "buffer.batch_size=4",
    "algorithm.repeat_times=2",
    "buffer.total_steps=1",
    "synchronizer.sync_method=memory",
)


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"


def placement(tmp_path: Path) -> dict[str, dict]:
    return read_json(tmp_path / JOB / SUMMARY_FILE)["placement"]


def trainer_steps(tmp_path: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(tmp_path / JOB / "monitor" / "trainer.jsonl")]


def can_unshare() -> bool:
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def node_local(tmp_path_factory) -> Path | None:
    """A folder the worker node sees as its own local disk (None where mount namespaces are not allowed)."""
    return tmp_path_factory.mktemp("node_local") if can_unshare() else None


@pytest.fixture(scope="module")
def cluster(node_local):
    """A head and a worker node, two logical GPUs each; yields the head's address."""
    with (
        ray_head("--num-gpus=2", "--node-name=head") as address,
        ray_worker(address, "worker1", "--num-gpus=2", local_dir=node_local),
    ):
        yield address


def run(tmp_path, model, data, address, *changes):
    config = write_experiment(tmp_path, model, data, *ONE_STEP, *changes)
    return trinity_run(config, f"cluster.ray_address={address}")


def test_each_role_sees_only_the_gpu_ray_gave_it(tmp_path, tiny_model_dir, arithmetic_data, cluster):
    """One node's two GPUs: one for the explorer's engine, one for the trainer."""
    assert_ok(run(tmp_path, tiny_model_dir, arithmetic_data, cluster, "cluster.gpu_per_node=2"))
    explorer, trainer = placement(tmp_path).values()
    assert explorer["node"] == trainer["node"]  # packed: both fit on one node
    assert len(explorer["gpu_ids"]) == len(trainer["gpu_ids"]) == 1
    assert explorer["gpu_ids"] != trainer["gpu_ids"]
    for role in (explorer, trainer):
        assert role["cuda_visible_devices"] == role["gpu_ids"][0]
    assert trainer_steps(tmp_path) == [1]


def test_colocate_shares_one_gpu_between_the_roles(tmp_path, tiny_model_dir, arithmetic_data, cluster):
    assert_ok(run(tmp_path, tiny_model_dir, arithmetic_data, cluster, "cluster.gpu_per_node=1", "mode=colocate"))
    explorer, trainer = placement(tmp_path).values()
    assert (explorer["node"], explorer["gpu_ids"]) == (trainer["node"], trainer["gpu_ids"])
    assert len(explorer["gpu_ids"]) == 1
    assert trainer_steps(tmp_path) == [1]


@pytest.mark.parametrize("sync", ["memory", "checkpoint"])
def test_node_num_2_puts_the_explorer_and_the_trainer_on_different_nodes(
    tmp_path, tiny_model_dir, arithmetic_data, cluster, sync
):
    """Two engines (a GPU each) take a whole node: the trainer's GPU is on the other one. The
    weights cross over through Ray's object store (memory) or the shared job folder (checkpoint)."""
    changes = ("cluster.node_num=2", "cluster.gpu_per_node=2", "explorer.rollout_model.engine_num=2")
    changes += (f"synchronizer.sync_method={sync}", "buffer.total_steps=2")
    assert_ok(run(tmp_path, tiny_model_dir, arithmetic_data, cluster, *changes))
    explorer, trainer = placement(tmp_path).values()
    assert {explorer["node"], trainer["node"]} == {"head", "worker1"}
    report = (tmp_path / JOB / "report.html").read_text()  # the run's report says so too
    assert f"explorer on node {explorer['node']}, GPUs {','.join(explorer['gpu_ids'])}" in report
    assert sorted(explorer["gpu_ids"]) == sorted(explorer["cuda_visible_devices"].split(",")) == ["0", "1"]
    assert len(trainer["gpu_ids"]) == 1
    assert trainer_steps(tmp_path) == [1, 2]
    assert read_json(tmp_path / JOB / SUMMARY_FILE)["roles"]["explorer"]["model_version"] >= 1  # the trainer's weights


def test_more_gpus_than_the_cluster_has_are_refused_before_any_role_starts(
    tmp_path, tiny_model_dir, arithmetic_data, cluster
):
    changes = ("cluster.node_num=3", "cluster.gpu_per_node=2", "explorer.rollout_model.engine_num=2")
    result = run(tmp_path, tiny_model_dir, arithmetic_data, cluster, *changes)
    assert result.returncode != 0
    assert (
        "cluster.node_num 3 x cluster.gpu_per_node 2 = 6 GPUs, but the Ray cluster has 4 GPUs (2 alive nodes with [2, 2])"
        in result.stderr
    )
    assert not (tmp_path / JOB / "monitor").exists()  # no role started


@pytest.mark.parametrize("local", ["checkpoint_root_dir", "buffer.trainer_input.experience_buffer.path"])
def test_a_folder_that_is_not_shared_storage_is_refused_across_nodes(
    tmp_path, tiny_model_dir, arithmetic_data, cluster, node_local, local
):
    """The worker node sees its own disk at ``node_local``: the roles would not find each other's
    files there (the checkpoints, or the sqlite experience buffer)."""
    if node_local is None:
        pytest.skip("a node-local folder needs mount namespaces (root)")
    folder = node_local / local
    changes = ("cluster.node_num=2", "cluster.gpu_per_node=2", "explorer.rollout_model.engine_num=2")
    if local == "checkpoint_root_dir":
        changes += (f"checkpoint_root_dir={folder}",)
        folder = job = folder / JOB.relative_to("ckpt")
    else:
        changes += ("buffer.trainer_input.experience_buffer.storage_type=sql", f"{local}={folder / 'buffer.db'}")
        job = tmp_path / JOB
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, *ONE_STEP, *changes)
    result = trinity_run(config, f"cluster.ray_address={cluster}")
    assert result.returncode != 0
    assert f"{local}: {folder} is not shared storage: node worker1 (the " in result.stderr
    assert not (job / "monitor").exists()  # refused before any role started


def test_gpus_another_job_holds_time_out_saying_how_many_are_free(tmp_path, tiny_model_dir, arithmetic_data, cluster):
    import ray

    from trinity.config import load_config
    from trinity.placement import PlacementError, place_roles

    path = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, *ONE_STEP)
    config = load_config(path, ["cluster.gpu_per_node=2"], run=True)
    ray.init(address=cluster, namespace="another-job")
    try:
        holder = ray.util.placement_group([{"GPU": 2}, {"GPU": 2}])  # every GPU of the cluster
        ray.get(holder.ready(), timeout=30)
        free = r"^the roles' GPUs \(explorer 1, trainer 1\) were not free within 1 s: the cluster has 0 GPUs free now"
        with pytest.raises(PlacementError, match=free):
            place_roles(config, timeout=1)
    finally:
        ray.shutdown()

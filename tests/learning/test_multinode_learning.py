"""A run across two nodes learns what the same run on one node learns, on the same budget.

GRPO on the arithmetic (single_turn_cells.GRPO, its 40 test steps), once on a local Ray of one
node and once on a cluster of two nodes with one logical GPU each (docs/multinode.md's
``ray start`` commands), where the explorer and the trainer each take a node's GPU: rollouts
reach the trainer through the run's Ray queue and the weights come back through Ray's object
store (memory sync), both across the nodes. Both rise by the cell's margin and end within
``END_TOLERANCE`` of each other. (Runs can differ a little however placed: the engine batches
concurrent requests as they arrive.)

GRPO's control (its rewards shuffled among the samples) runs in test_single_turn_learning.py.
"""

from __future__ import annotations

from learning_cells import check_learns, job_dir, run_cell
from single_turn_cells import GRPO

from helpers.ray_cluster import ray_head, ray_worker
from trinity.common.files import read_json
from trinity.report import SUMMARY_FILE

END_TOLERANCE = 0.1
"""How far below the one-node run's final reward the two-node run may end."""


def test_grpo_on_two_nodes_learns_as_on_one(workspace, tmp_path):
    one_node = check_learns(GRPO, None, workspace, tmp_path / "one", subprocess_run=True)
    across = ["cluster.node_num=2", "cluster.gpu_per_node=1"]
    with ray_head("--num-gpus=1", "--node-name=head") as address, ray_worker(address, "worker1", "--num-gpus=1"):
        extra = [*across, f"cluster.ray_address={address}"]
        two_nodes = run_cell(GRPO, workspace, tmp_path / "two", steps=GRPO.test_steps, extra=extra, subprocess_run=True)
    placement = read_json(job_dir(tmp_path / "two") / SUMMARY_FILE)["placement"]
    assert {place["node"] for place in placement.values()} == {"head", "worker1"}, placement
    assert two_nodes.learned, two_nodes.describe()
    assert two_nodes.end >= one_node.end - END_TOLERANCE, f"{one_node.describe()}\n{two_nodes.describe()}"

"""What each role's Ray actor asks for (``trinity.placement``), from the config alone; the runs on
a cluster with logical GPUs are in tests/e2e/test_multinode.py."""

from __future__ import annotations

import pytest

from trinity.config import check_tree
from trinity.model.engines import RolloutEngine
from trinity.placement import PlacementError, check_fits, first_devices, role_gpus
from trinity.rollout.transformers_rollout import TransformersRolloutEngine


def checked(mode: str = "both", gpus: int = 2, nodes: int = 1, engines: int = 1, **more):
    config, issues = check_tree(
        {
            "mode": mode,
            "model": {"model_path": "/models/tiny", "max_prompt_tokens": 8, "max_response_tokens": 8},
            "buffer": {"train_batch_size": 8, "explorer_input": {"taskset": {"path": "tasks.jsonl"}}},
            "cluster": {"node_num": nodes, "gpu_per_node": gpus},
            "explorer": {"rollout_model": {"engine_type": "transformers", "engine_num": engines}, **more},
            "trainer": {"trainer_type": "torch"},
        }
    )
    issues.raise_if_any()
    return config


def test_roles_ask_for_their_engines_gpus_and_nothing_on_a_cpu_cluster(caplog):
    assert role_gpus(checked(gpus=0)) == {}  # the quickstart on a CPU: as before
    assert role_gpus(checked(gpus=2)) == {"explorer": 1, "trainer": 1}
    assert not caplog.records
    assert role_gpus(checked(gpus=4, engines=2)) == {"explorer": 2, "trainer": 1}  # the torch engine: one device
    assert "trainer.trainer_type torch trains on 1 of the trainer's 2 GPUs" in caplog.text
    assert role_gpus(checked(mode="train", gpus=2)) == {"trainer": 1}
    assert role_gpus(checked(mode="explore", gpus=2, engines=2)) == {"explorer": 2}
    assert role_gpus(checked(mode="colocate", gpus=1)) == {"explorer": 0.5, "trainer": 0.5}


class _OwnActors(RolloutEngine):
    """An engine whose GPUs are Ray actors of its own (as vLLM's)."""

    in_explorer_process = False


def test_each_in_process_engine_gets_the_next_devices_of_the_explorer():
    config = checked(gpus=4, engines=2)
    model = config.explorer.rollout_model
    assert first_devices(config, [(model, TransformersRolloutEngine), (model, TransformersRolloutEngine)]) == [0, 2]
    assert first_devices(config, [(model, _OwnActors), (model, TransformersRolloutEngine)]) == [None, 0]
    assert first_devices(checked(gpus=0, engines=2), [(model, TransformersRolloutEngine)]) == [None]


def test_a_role_larger_than_any_node_is_refused_naming_the_key():
    config = checked(gpus=2, nodes=2, engines=3)
    with pytest.raises(
        PlacementError, match=r"^explorer.rollout_model.engine_num: the explorer's engines .* need 3 GPUs"
    ):
        check_fits(config, role_gpus(config), [2, 2])
    with pytest.raises(
        PlacementError, match=r"^cluster.node_num 2 x cluster.gpu_per_node 2 = 4 GPUs, but the Ray cluster has 2"
    ):
        check_fits(config, role_gpus(config), [2])

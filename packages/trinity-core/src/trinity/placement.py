"""Where the roles run: the GPUs each role's Ray actor asks for, and the placement group that
reserves them on the cluster's nodes.

The reference engines compute in their role's own process, so each role's actor asks for its
engines' GPUs (the explorer's ``engine_num x tensor_parallel_size`` per model, the trainer's
``TrainingEngine.process_gpus``) and Ray's ``CUDA_VISIBLE_DEVICES`` keeps roles off each other's
devices. One placement group per stage (PACK) holds a bundle per role, so a run gets all its GPUs
or is told at once what is missing; ``colocate`` gives each role half of one GPU, as Trinity-RFT
does; a CPU cluster (``gpu_per_node: 0``) asks for nothing. More: ``docs/multinode.md``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trinity.config.rules import engine_gpus
from trinity.config.schema import Config, InferenceModelConfig
from trinity.model.engines import RolloutEngine
from trinity.plugins import Kind, resolve

logger = logging.getLogger(__name__)

PLACEMENT_TIMEOUT_S = 60.0
"""How long a stage waits for its placement group (GPUs another job holds may come free)."""


class PlacementError(RuntimeError):
    """The cluster cannot hold the run's roles; the message names the config keys to change."""


def first_devices(config: Config, models: list[tuple[InferenceModelConfig, type[RolloutEngine]]]) -> list[int | None]:
    """Per model, the CUDA device (of the explorer's own) of its first engine: the in-process
    engines' GPUs one after another, in the order of ``explorer.inference_models()``. None for a
    model whose engines compute elsewhere, and on a CPU cluster."""
    firsts: list[int | None] = []
    taken = 0
    for model, cls in models:
        computes_here = config.cluster.total_gpu_num and cls.in_explorer_process and engine_gpus(model)
        firsts.append(taken if computes_here else None)
        taken += model.engine_num * engine_gpus(model) if computes_here else 0
    return firsts


@contextlib.contextmanager
def cuda_device(index: int | None) -> Iterator[None]:
    """``index`` is this process's current CUDA device inside (where an engine built there puts
    its model: ``engine.modeling.default_device``); nothing for None or without CUDA."""
    if index is None:
        yield
        return
    import torch

    with torch.cuda.device(index) if torch.cuda.is_available() else contextlib.nullcontext():
        yield


def role_gpus(config: Config) -> dict[str, float]:
    """``{role name: GPUs}`` its actor asks Ray for, roles asking none left out."""
    if not config.cluster.total_gpu_num:
        return {}
    gpus: dict[str, float] = {}
    if config.mode != "train":
        models = [model for _, model in config.explorer.inference_models()]
        classes = [resolve(Kind.ROLLOUT_ENGINE, model.engine_type) for model in models]
        gpus[config.explorer.name] = sum(
            model.engine_num * engine_gpus(model)
            for model, cls in zip(models, classes, strict=True)
            if cls.in_explorer_process
        )
    if config.in_one_run or config.mode == "train":
        engine = resolve(Kind.TRAINER_ENGINE, config.trainer.trainer_type)
        gpus[config.trainer.name] = engine.process_gpus(config)
        if 0 < gpus[config.trainer.name] < config.cluster.trainer_gpu_num:
            logger.warning(
                "trainer.trainer_type %s trains on %d of the trainer's %d GPUs (cluster.trainer_gpu_num); "
                "the rest stay idle: give them to the explorer (explorer.rollout_model.engine_num) or "
                "train with trainer_type verl",
                config.trainer.trainer_type,
                gpus[config.trainer.name],
                config.cluster.trainer_gpu_num,
            )
    if config.mode == "colocate":
        # Half of the one GPU each; an explorer whose engines have actors of their own (a whole
        # GPU each) leaves the trainer to share the device unasked (Ray splits no GPU between them).
        if not gpus.get(config.explorer.name):
            return {}
        return {name: 0.5 for name, count in gpus.items() if count}
    return {name: count for name, count in gpus.items() if count}


def check_fits(config: Config, gpus: dict[str, float], node_gpus: list[int]) -> None:
    """Refuse, naming the keys, a run that asks for more GPUs than the cluster's alive nodes
    (``node_gpus``: the GPUs of each) have, or an explorer for more than one node holds (the
    trainer's process asks for one GPU at most)."""
    cluster = config.cluster
    have = sum(node_gpus)
    nodes = f"the Ray cluster has {have} GPUs ({len(node_gpus)} alive nodes with {sorted(node_gpus, reverse=True)})"
    if cluster.total_gpu_num > have:
        raise PlacementError(
            f"cluster.node_num {cluster.node_num} x cluster.gpu_per_node {cluster.gpu_per_node} = "
            f"{cluster.total_gpu_num} GPUs, but {nodes}: start the missing nodes "
            "(`ray start --address=<head>:<port> --num-gpus=<n>` on each) or lower cluster.node_num / cluster.gpu_per_node"
        )
    explorer = gpus.get(config.explorer.name, 0)
    if explorer > max(node_gpus, default=0):
        raise PlacementError(
            f"explorer.rollout_model.engine_num: the explorer's engines compute in its one process, on one node, "
            f"and need {explorer:g} GPUs; {nodes}: lower explorer.rollout_model.engine_num or tensor_parallel_size, "
            "or use an engine_type whose engines are Ray actors of their own"
        )


@dataclass
class Placement:
    """The Ray actor options of each role of a stage, and the placement group behind them."""

    gpus: dict[str, float] = field(default_factory=dict)
    group: Any = None
    bundles: dict[str, int] = field(default_factory=dict)

    def options(self, role: str) -> dict[str, Any]:
        """What ``role``'s actor asks Ray for (nothing on a CPU cluster)."""
        if role not in self.gpus:
            return {}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=self.bundles[role])
        return {"num_gpus": self.gpus[role], "scheduling_strategy": strategy}

    def nodes(self) -> dict[str, str]:
        """``{role: id of the node its bundle is on}``."""
        from ray.util import placement_group_table

        where = placement_group_table(self.group)["bundles_to_node_id"]
        return {role: where[index] for role, index in self.bundles.items()}

    def remove(self) -> None:
        if self.group is not None:
            from ray.util import remove_placement_group

            remove_placement_group(self.group)
            self.group = None


def place_roles(config: Config, timeout: float = PLACEMENT_TIMEOUT_S) -> Placement:
    """Reserve the stage's role GPUs on the cluster: a bundle per role (one shared in colocate),
    packed onto as few nodes as they fit on. Raises ``PlacementError`` for a run the cluster
    cannot hold, or whose GPUs do not come free within ``timeout`` seconds."""
    gpus = role_gpus(config)
    if not gpus:
        return Placement()
    import ray
    from ray.util import placement_group

    alive = [node for node in ray.nodes() if node.get("Alive")]
    node_gpus = [int(node.get("Resources", {}).get("GPU", 0)) for node in alive]
    if not any(node_gpus):
        # a cluster of CPUs: each device the config counts is a CPU process (verl's ranks, the
        # engines on CPUs), as before roles asked Ray for GPUs; nothing to reserve
        logger.warning(
            "cluster.gpu_per_node %s, but the Ray cluster has no GPUs: every role computes on CPUs",
            config.cluster.gpu_per_node,
        )
        return Placement()
    check_fits(config, gpus, node_gpus)
    roles = list(gpus)
    shared = config.mode == "colocate"
    bundles = [{"GPU": 1.0}] if shared else [{"GPU": float(gpus[role])} for role in roles]
    group = placement_group(bundles, strategy="PACK", name=f"{config.ray_namespace}-roles")
    placement = Placement(gpus, group, {role: 0 if shared else i for i, role in enumerate(roles)})
    try:
        ray.get(group.ready(), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        placement.remove()
        asked = ", ".join(f"{role} {count:g}" for role, count in gpus.items())
        free = ray.available_resources().get("GPU", 0)
        raise PlacementError(
            f"the roles' GPUs ({asked}) were not free within {timeout:g} s: the cluster has {free:g} "
            "GPUs free now (`ray status` shows who holds them): end the jobs holding them, or lower "
            "explorer.rollout_model.engine_num / cluster.gpu_per_node"
        ) from None
    try:
        check_shared(config, placement.nodes())
    except PlacementError:
        placement.remove()
        raise
    return placement


def shared_folders(config: Config) -> dict[str, str]:
    """``{config key: folder}`` that the driver and every node holding a role must see alike:
    the job folder (checkpoints, meta, monitor files) and, in a run of both roles, the folder of
    the experience buffer's file or sqlite database."""
    folders = {"checkpoint_root_dir": config.checkpoint_job_dir}
    experience = config.buffer.trainer_input.experience_buffer
    path = experience.path or ""
    if config.in_one_run and path and ("://" not in path or path.startswith("sqlite:///")):
        database = path.removeprefix("sqlite:///") if "://" in path else path
        folders["buffer.trainer_input.experience_buffer.path"] = os.path.dirname(os.path.abspath(database))
    return folders


def check_shared(config: Config, nodes: dict[str, str]) -> None:
    """Refuse a run whose roles are on other nodes than the driver's, or on several, where a
    folder of ``shared_folders`` is not the same storage on each: each node's probe must read
    the token the driver wrote there (a node-local disk would not have it)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    driver = ray.get_runtime_context().get_node_id()
    if set(nodes.values()) <= {driver}:
        return
    token = uuid.uuid4().hex
    markers = {key: os.path.join(folder, f".trinity-shared-{token}") for key, folder in shared_folders(config).items()}
    for marker in markers.values():
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w") as out:
            out.write(token)
    try:
        probe = ray.remote(num_cpus=0, max_retries=0)(_seen)
        node_ids = sorted(set(nodes.values()) - {driver})
        answers = ray.get(
            [
                probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                    markers, token
                )
                for node in node_ids
            ]
        )
    finally:
        for marker in markers.values():
            with contextlib.suppress(OSError):
                os.remove(marker)
    names = node_names()
    for node, seen in zip(node_ids, answers, strict=True):
        missing = [key for key in markers if key not in seen]
        if missing:
            key = missing[0]
            roles = " and ".join(role for role, at in nodes.items() if at == node)
            folder = os.path.dirname(markers[key])
            raise PlacementError(
                f"{key}: {folder} is not shared storage: node {names.get(node) or node} (the {roles}'s) does not "
                "see what the driver's node writes there: put it on storage every node mounts at the same path "
                "(NFS, a cloud file system)"
                + (", or use a PostgreSQL URL, or a queue without a path" if key.startswith("buffer.") else "")
            )


def _seen(markers: dict[str, str], token: str) -> list[str]:
    """The keys of ``markers`` whose file holds ``token`` on this node."""
    seen = []
    for key, marker in markers.items():
        with contextlib.suppress(OSError), open(marker) as found:
            if found.read() == token:
                seen.append(key)
    return seen


def where_am_i() -> dict[str, Any]:
    """The node, Ray GPU ids and ``CUDA_VISIBLE_DEVICES`` of this actor (a role reports them)."""
    import ray

    context = ray.get_runtime_context()
    return {
        "node_id": context.get_node_id(),
        "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def node_names() -> dict[str, str]:
    """``{node id: node name}`` of the cluster's nodes (``ray start --node-name``, else the node's IP)."""
    import ray

    return {node["NodeID"]: node.get("NodeName", "") for node in ray.nodes()}

"""The ``cluster`` section: machines and GPUs."""

from __future__ import annotations

from pydantic import Field

from trinity.config.base import ConfigModel, derived


class ClusterConfig(ConfigModel):
    """The machines of the run."""

    ray_address: str = Field(
        "auto", description="Ray cluster to join: auto (a running one, else a new local one), local, or an address."
    )
    single_process: bool = Field(
        False,
        description="Run explorer and trainer as threads of the `trinity run` process, without Ray: a laptop's "
        "CPU run starts in about half the time. One machine's CPU, engines that compute in the role's process "
        "(transformers) and the torch trainer; each role's log file then holds the whole process's log.",
    )
    node_num: int = Field(0, ge=0, description="Nodes; 0: detected from the Ray cluster.")
    gpu_per_node: int = Field(0, ge=0, description="GPUs per node; 0: detected (0 on a CPU machine).")
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="Torch threads per role; unset: all cores when the roles take turns, a share when they overlap.",
    )
    total_gpu_num: int = derived(0, "node_num x gpu_per_node.", ge=0)
    rollout_gpu_num: int = derived(0, "GPUs of the rollout engines.", ge=0)
    auxiliary_model_gpu_num: int = derived(0, "GPUs of the auxiliary models.", ge=0)
    explorer_gpu_num: int = derived(0, "GPUs of the explorer.", ge=0)
    trainer_gpu_num: int = derived(0, "GPUs of the trainer.", ge=0)
    trainer_node_num: int = derived(0, "Nodes of the trainer.", ge=0)
    trainer_gpu_num_per_node: int = derived(0, "GPUs per node of the trainer.", ge=0)

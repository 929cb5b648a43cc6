"""The verl FSDP training engine (``trainer.trainer_type: verl``).

Data parallel over the trainer's devices (``trainer_gpu_num``, at least one): each rank is a
``trinity_verl.rank.VerlRank``; a world of one runs in the trainer's own process, a larger one as Ray
actors, one per device, in one torch.distributed group (``trinity_verl.distributed``; gloo processes
without CUDA). Every call goes to all ranks with the whole batch; the engine puts the ranks'
log-probs / values back in row order and adds up their loss metrics. A step is one mini-batch, as in
the torch engine; checkpoints are verl's, plus the actor's HF export on request (the package README).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from trinity.plugin_api import Batch, Config, Kind, Metrics, TrainingEngine, resolve, trainer_gpu_num
from trinity_verl.checkpoint import weights_only_loads
from trinity_verl.config import verl_config
from trinity_verl.distributed import RankGroup
from trinity_verl.rank import Part, StepPart, VerlRank, micro_batch_sizes

STATE_FILE = "trinity_state.json"
"""Step counters of a checkpoint (verl's extra state has the RNG and LR scheduler, not these)."""


def world_size(config: Config) -> int:
    """The engine's number of ranks: the trainer's GPUs (CPU processes without CUDA), at least one."""
    return max(trainer_gpu_num(config), 1)


class VerlTrainingEngine(TrainingEngine):
    """Actor, reference and critic updates through verl's FSDP workers on every trainer device.
    With ``model.lora_configs`` verl wraps the actor with a peft adapter, which alone trains and syncs."""

    takes_lora = True
    in_trainer_process = False  # untried without Ray: its ranks beyond the first are Ray actors

    @classmethod
    def process_gpus(cls, config: Config) -> int:
        """One rank runs in the trainer's process (its GPU asked for by the trainer's actor); more
        are Ray actors that ask for one GPU each."""
        return 1 if world_size(config) == 1 and trainer_gpu_num(config) else 0

    def __init__(self, config: Config) -> None:
        self.config = config
        verl = verl_config(config, "cuda" if torch.cuda.is_available() else "cpu")  # config errors before any rank
        self.algorithm = resolve(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type)
        if self.algorithm.data_schema == "dpo" and (
            config.trainer.use_dynamic_bsz or any(size % 2 for size in micro_batch_sizes(verl))
        ):
            raise ValueError(
                "DPO on trainer_type verl keeps chosen/rejected pairs in one micro-batch only with "
                "trainer.use_dynamic_bsz: false and even micro-batch sizes"
            )
        self.ranks = RankGroup(functools.partial(VerlRank, config), world_size(config))
        algo = config.algorithm
        needs_ref = self.algorithm.needs_reference(algo.kl_loss_fn, algo.kl_penalty_fn)
        self.reference = "ref" if needs_ref else None  # the ranks' name of the model
        self.critic = "critic" if self.algorithm.use_critic else None
        self.global_step = 0

    @classmethod
    def native_config(cls, config: Config) -> dict[str, Any]:
        """The verl config (resolved) the engine would run with on a GPU."""
        return OmegaConf.to_container(verl_config(config, "cuda"), resolve=True)

    # -- forward passes -------------------------------------------------------------------

    def _per_token(self, model: str, batch: Batch) -> torch.Tensor:
        """``[B, R]`` log-probs or values of ``batch``: the DP ranks' rows put back in place."""
        parts: list[Part] = [p for p in self.ranks.call("per_token", model, batch) if p]
        rows = torch.cat([p.rows for p in parts])
        merged = torch.empty(len(rows), *parts[0].value.shape[1:], dtype=parts[0].value.dtype)
        merged[rows] = torch.cat([p.value for p in parts])
        return merged[: batch.batch_size]  # the padding rows come last

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        return self._per_token("actor", batch)

    def compute_ref_logprobs(self, batch: Batch) -> torch.Tensor:
        if self.reference is None:
            raise RuntimeError(f"algorithm '{self.algorithm.name}' with no KL function has no reference model")
        return self._per_token(self.reference, batch)

    def compute_values(self, batch: Batch) -> torch.Tensor:
        if self.critic is None:
            raise RuntimeError(f"algorithm '{self.algorithm.name}' has no critic")
        return self._per_token(self.critic, batch)

    # -- updates --------------------------------------------------------------------------

    def train_step(self, batch: Batch) -> Metrics:
        batch = self.prepare_batch(batch)
        if self.critic is not None and batch.returns is None:
            raise ValueError("the critic needs batch.returns: run the advantage function (e.g. ppo/GAE) first")
        actor = self.trains_actor(self.config.trainer.critic_warmup)
        parts: list[StepPart] = [p for p in self.ranks.call("train_step", batch, actor) if p]
        metrics = dict(parts[0].shared)
        for part in parts:
            for key, value in part.sums.items():
                metrics[key] = metrics.get(key, 0.0) + value
        self.global_step += 1
        return metrics

    # -- checkpoints and sync -------------------------------------------------------------

    @classmethod
    def export_hf(cls, checkpoint: Path, out: Path) -> None:
        """The actor's HF export where the checkpoint holds one, else its FSDP shards merged by
        verl's model merger (bfloat16, as verl writes it; shards read ``weights_only``) with the
        config and tokenizer of ``actor/huggingface``."""
        actor = checkpoint / "actor"
        if any((actor / "huggingface").glob("*.safetensors")):
            super().export_hf(checkpoint, out)
            return
        from verl.model_merger.base_model_merger import ModelMergerConfig
        from verl.model_merger.fsdp_model_merger import FSDPModelMerger

        merge = ModelMergerConfig(
            operation="merge",
            backend="fsdp",
            local_dir=str(actor),
            target_dir=str(out),
            hf_model_config_path=str(actor / "huggingface"),
        )
        with weights_only_loads():  # the merger reads the shards as resume does
            FSDPModelMerger(merge).merge_and_save()

    def save_checkpoint(self, directory: str, step: int, hf_weights: bool = True) -> None:
        self.ranks.call("save_checkpoint", directory, step, hf_weights)
        state = {"step": step, "global_step": self.global_step}
        (Path(directory) / STATE_FILE).write_text(json.dumps(state))

    def load_checkpoint(self, directory: str) -> int:
        self.ranks.call("load_checkpoint", directory)
        state = json.loads((Path(directory) / STATE_FILE).read_text())
        self.global_step = state["global_step"]
        return state["step"]

    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The actor's full weights (gathered from every rank's FSDP shards) as a CPU state dict;
        with LoRA the adapter's tensors alone."""
        return self.ranks.call("weights")[0]

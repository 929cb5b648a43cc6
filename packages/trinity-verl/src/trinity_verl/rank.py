"""One rank of the verl engine: verl 0.9.1's workers in one process of the data-parallel world.

An ``ActorRolloutRefWorker`` with role ``actor`` (another with role ``ref`` when the algorithm needs
one) and a ``TrainingWorker`` for a ``value_model`` critic; verl owns the model, FSDP,
micro-batching, optimizer and checkpoints, the losses are trinity's (``trinity.training.losses``).
Every rank pads the whole batch the same way with fully masked rows and hands verl its own share;
each micro-batch's loss is weighted by its share of the whole batch, so the gradients FSDP averages
are the whole batch's. Results come back per data-parallel rank (``None`` from the other ranks of a
sequence-parallel group); ``trinity_verl.engine`` merges them. Details: the package README.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from trinity.plugin_api import Batch, Config, Kind, LossFns, Metrics, Totals, batch_totals, critic_micro_loss, resolve
from trinity_verl import cpu
from trinity_verl.checkpoint import weights_only_loads
from trinity_verl.config import verl_config
from trinity_verl.distributed import World, init_process_group

MICRO_BATCH_SIZES = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
    "critic.forward_micro_batch_size_per_gpu",
)
HF_MODEL = "hf_model"
"""verl's checkpoint content for the HF export (``<dir>/huggingface``)."""


def micro_batch_sizes(verl: DictConfig) -> list[int]:
    return [int(size) for size in (OmegaConf.select(verl, key) for key in MICRO_BATCH_SIZES) if size]


@contextmanager
def _value_heads_as_trinity(attention: str) -> Iterator[None]:
    """While verl builds a critic: load it as the torch engine does (a new value head starts at
    zero, deterministically) with the configured attention (verl asks for flash_attention_2)."""
    import verl.utils.model as verl_models

    original = verl_models.load_valuehead_model

    def load(local_path: str, torch_dtype: torch.dtype, model_config: Any, trust_remote_code: bool) -> Any:
        from transformers import AutoModelForTokenClassification

        model, info = AutoModelForTokenClassification.from_pretrained(
            local_path,
            dtype=torch_dtype,
            config=model_config,
            attn_implementation=attention,
            trust_remote_code=trust_remote_code,
            output_loading_info=True,
        )
        if any(key.startswith("score.") for key in info["missing_keys"]):
            torch.nn.init.zeros_(model.score.weight)
            if model.score.bias is not None:
                torch.nn.init.zeros_(model.score.bias)
        return model

    verl_models.load_valuehead_model = load
    try:
        yield
    finally:
        verl_models.load_valuehead_model = original


class _Accumulator:
    """Loss metrics of the micro-batches of one update, each weighted by its share of the batch."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.sums: dict[str, float] = {}

    def add(self, metrics: Metrics, weight: float) -> None:
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + weight * value / self.epochs


@dataclass
class Part:
    """What one data-parallel rank returns: its rows' share of a result."""

    rows: torch.Tensor
    """The rows of the (padded) batch that ``value`` holds, in its order."""
    value: Any


def rank_rows(padded: Batch, dp_size: int, balance: bool) -> list[list[int]]:
    """Each data-parallel rank's rows of ``padded``: contiguous shares, or with
    ``trainer.balance_batch`` verl's trainer's equal-size partitions of about equal work (by
    ``calculate_workload`` of each row's length), so no rank waits on one given the longest rows.
    Every rank computes the same partitions from the same batch."""
    share = padded.batch_size // dp_size
    if not balance or dp_size == 1:
        return [list(range(rank * share, (rank + 1) * share)) for rank in range(dp_size)]
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

    workload = calculate_workload(padded.attention_mask.sum(-1)).tolist()
    return [sorted(part) for part in get_seqlen_balanced_partitions(workload, dp_size, equal_size=True)]


@dataclass
class StepPart:
    """One data-parallel rank's metrics of an update."""

    sums: Metrics
    """Loss metrics of this rank's rows, weighted by their share of the whole batch (they add up)."""
    shared: Metrics
    """Metrics every rank has the same (gradient norms, learning rates)."""


class VerlRank:
    """verl's workers in this process, as rank ``world.rank`` of the engine's world."""

    def __init__(self, config: Config, world: World) -> None:
        self.config = config
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            cpu.enable_cpu()
            init_process_group("gloo", world)
        else:
            init_process_group("cpu:gloo,cuda:nccl", world)
        self.verl: DictConfig = verl_config(config, device)
        self.algorithm = resolve(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type)
        self.losses = LossFns.from_config(config)
        self._batch: Batch | None = None  # the whole (padded) batch of the update under way
        self._totals: Totals | None = None
        self._metrics = _Accumulator(1)

        self.actor = self._worker("actor")
        self.actor.set_loss_fn(self._actor_loss)
        algo = config.algorithm
        needs_ref = self.algorithm.needs_reference(algo.kl_loss_fn, algo.kl_penalty_fn)
        # with LoRA the reference is the actor with its adapter disabled (verl's no_lora_adapter), not a copy
        self.reference = self._worker("ref") if needs_ref and not config.model.lora_configs else None
        self.critic = self._critic() if self.algorithm.use_critic else None
        engine = self.actor.actor.engine
        self.dp_rank, self.dp_size = engine.get_data_parallel_rank(), engine.get_data_parallel_size()
        self.collects = engine.is_mp_src_rank_with_outputs()

    # -- construction ---------------------------------------------------------------------

    def _worker(self, role: str) -> Any:
        from verl.workers.engine_workers import ActorRolloutRefWorker

        worker = ActorRolloutRefWorker(config=self.verl.actor_rollout_ref, role=role)
        worker.init_model()
        return worker

    def _critic(self) -> Any:
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig

        section = self.verl.critic
        critic = omega_conf_to_dataclass(section)
        engine = critic.engine
        engine.infer_max_token_len_per_gpu = critic.ppo_infer_max_token_len_per_gpu
        engine.max_token_len_per_gpu = critic.ppo_max_token_len_per_gpu
        engine.micro_batch_size_per_gpu = critic.ppo_micro_batch_size_per_gpu
        engine.infer_micro_batch_size_per_gpu = critic.forward_micro_batch_size_per_gpu
        engine.use_dynamic_bsz = critic.use_dynamic_bsz
        worker = TrainingWorker(
            TrainingWorkerConfig(
                model_type="value_model",
                model_config=critic.model,
                engine_config=engine,
                optimizer_config=critic.optim,
                checkpoint_config=critic.checkpoint,
            )
        )
        attention = OmegaConf.select(section, "model.override_config.attn_implementation") or "flash_attention_2"
        with _value_heads_as_trinity(attention):
            worker.reset()
        worker.set_loss_fn(self._critic_loss)
        return worker

    # -- batches --------------------------------------------------------------------------

    def _row_unit(self) -> int:
        """What a batch's row count must divide by: the DP size, times (without dynamic batching)
        every micro-batch size, since verl splits each rank's rows into equal micro-batches."""
        if self.config.trainer.use_dynamic_bsz:
            return self.dp_size
        return self.dp_size * math.lcm(*micro_batch_sizes(self.verl))

    def padded(self, batch: Batch) -> Batch:
        """``batch`` plus copies of row 0 with an empty response mask, to a multiple of ``_row_unit``."""
        missing = -batch.batch_size % self._row_unit()
        if not missing:
            return batch
        filler = batch.select([0] * missing)
        filler = filler.with_fields(response_mask=torch.zeros_like(filler.response_mask))
        fields = {name: getattr(batch, name) for name in batch.__dataclass_fields__}
        return Batch(**{k: (torch.cat([v, getattr(filler, k)]) if v is not None else None) for k, v in fields.items()})

    def partitions(self, padded: Batch) -> list[list[int]]:
        """Every rank's rows of ``padded`` (:func:`rank_rows`), computed once per batch."""
        return rank_rows(padded, self.dp_size, self.config.trainer.balance_batch)

    def _tensordict(self, padded: Batch, rows: torch.Tensor, **meta: Any) -> Any:
        """verl's no-padding TensorDict of this rank's ``rows`` of ``padded`` (numbered by their
        place in it), temperature 1 (raw logprobs)."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        mine = padded.select(rows)
        td = tu.get_tensordict(
            {
                "input_ids": mine.input_ids,
                "attention_mask": mine.attention_mask,
                "position_ids": mine.position_ids,
                "prompts": mine.input_ids[:, : mine.prompt_width],
                "responses": mine.responses,
                "response_mask": mine.response_mask,
                "rows": rows,
            },
            non_tensor_dict={"temperature": 1.0, **meta},
        )
        return left_right_2_no_padding(td)

    # -- forward passes -------------------------------------------------------------------

    def per_token(self, model: str, batch: Batch) -> Part | None:
        """``[rows, R]`` log-probs (``actor``, ``ref``) or values (``critic``) of this rank's rows."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        padded = self.padded(batch)
        rows = torch.tensor(self.partitions(padded)[self.dp_rank])
        td = self._tensordict(padded, rows, calculate_entropy=False, compute_loss=False)
        if model == "critic":
            out, key = self.critic.infer_batch(td), "values"
        elif model == "ref" and self.reference is not None:
            out, key = self.reference.compute_ref_log_prob(td), "log_probs"
        elif model == "ref":  # LoRA: the base model
            tu.assign_non_tensor(td, no_lora_adapter=True)
            out, key = self.actor.compute_log_prob(td), "log_probs"
        else:
            out, key = self.actor.compute_log_prob(td), "log_probs"
        if not self.collects:
            return None
        return Part(rows, no_padding_2_padding(tu.get(out, key), td).float().cpu())

    # -- updates --------------------------------------------------------------------------

    def train_step(self, batch: Batch, actor: bool = True) -> StepPart | None:
        """One update of the critic (when there is one) and, with ``actor``, the actor on
        ``batch`` (prepared)."""
        from verl.utils import tensordict_utils as tu

        self._batch = self.padded(batch)
        self._totals = batch_totals(batch)
        size = self._batch.batch_size
        partitions = self.partitions(self._batch)
        rows = torch.tensor(partitions[self.dp_rank])
        part = StepPart({}, self._balance_metrics(partitions))
        models = [("critic", self.critic, "critic")] if self.critic is not None else []
        if actor:
            models.append(("actor", self.actor, "actor_rollout_ref.actor"))
        for name, worker, section in models:
            epochs = int(OmegaConf.select(self.verl, f"{section}.ppo_epochs"))
            self._metrics = _Accumulator(epochs)
            td = self._tensordict(
                self._batch,
                rows,
                calculate_entropy=name == "actor",
                compute_loss=True,
                global_batch_size=size,
                mini_batch_size=size,
                epochs=epochs,
                seed=int(OmegaConf.select(self.verl, f"{section}.data_loader_seed")),
                dataloader_kwargs={"shuffle": False},
            )
            update = worker.update_actor if name == "actor" else worker.train_mini_batch
            out = update(td)
            # rollout correction's metrics keep verl's rollout_corr/ names (as trinity.training.losses.role_metrics)
            part.sums.update(
                {k if k.startswith("rollout_corr/") else f"{name}/{k}": v for k, v in self._metrics.sums.items()}
            )
            if out is None:
                continue
            out = tu.get(out, "metrics")
            norms = out.get("grad_norm", [])
            part.shared[f"{name}/grad_norm"] = float(sum(norms) / len(norms)) if norms else 0.0
            lrs = out.get("lr", [])
            if lrs:
                part.shared[f"{name}/lr"] = float(lrs[-1])
        self._batch = self._totals = None
        return part if self.collects else None

    def _balance_metrics(self, partitions: list[list[int]]) -> Metrics:
        """verl's ``global_seqlen/*`` of the batch under way: the ranks' tokens in contiguous
        shares (min, max, minmax_diff) and as ``partitions`` gives them (balanced_min, balanced_max)."""
        if not self.config.trainer.balance_batch or self.dp_size == 1:
            return {}
        from verl.utils.seqlen_balancing import log_seqlen_unbalance

        lengths = self._batch.attention_mask.sum(-1).tolist()
        return {k: float(v) for k, v in log_seqlen_unbalance(lengths, partitions, "global_seqlen").items()}

    def _micro(self, data: Any) -> Batch:
        return self._batch.select(data["rows"].cpu()).to(data["rows"].device)

    def _actor_loss(self, model_output: dict, data: Any, dp_group: Any = None) -> tuple[torch.Tensor, dict]:
        """verl's loss callback: trinity's policy, KL and entropy losses on one micro-batch."""
        from verl.workers.utils.padding import no_padding_2_padding

        mb = self._micro(data)
        logprobs = no_padding_2_padding(model_output["log_probs"], data).float()
        entropy = no_padding_2_padding(model_output["entropy"], data).float()
        loss, metrics, weight = self.losses.actor_micro_loss(logprobs, entropy, mb, self._totals)
        self._metrics.add(metrics, weight)
        return loss * data["dp_size"], {}  # FSDP averages gradients over the DP ranks

    def _critic_loss(self, model_output: dict, data: Any, dp_group: Any = None) -> tuple[torch.Tensor, dict]:
        from verl.workers.utils.padding import no_padding_2_padding

        mb = self._micro(data)
        values = no_padding_2_padding(model_output["values"], data).float()
        clip = float(self.verl.critic.cliprange_value)
        loss, metrics, weight = critic_micro_loss(values, mb, self._totals, self.config.algorithm.loss_agg_mode, clip)
        self._metrics.add(metrics, weight)
        return loss * data["dp_size"], {}

    # -- checkpoints and sync (collective: every rank takes part) -------------------------

    def _savers(self) -> list[tuple[str, Any, Any]]:
        """``(subdirectory, worker, verl engine)`` of each model a checkpoint holds."""
        parts = [("actor", self.actor, self.actor.actor.engine)]
        if self.critic is not None:
            parts.append(("critic", self.critic, self.critic.engine))
        return parts

    def save_checkpoint(self, directory: str, step: int, hf_weights: bool) -> None:
        """verl's sharded checkpoint of each model under ``directory``; the actor's HF export
        in ``actor/huggingface`` when ``hf_weights``."""
        for name, worker, engine in self._savers():
            contents = [c for c in engine.checkpoint_manager.checkpoint_save_contents if c != HF_MODEL]
            if hf_weights and name == "actor":
                contents.append(HF_MODEL)
            engine.checkpoint_manager.checkpoint_save_contents = contents
            worker.save_checkpoint(f"{directory}/{name}", global_step=step)

    def load_checkpoint(self, directory: str) -> None:
        """verl's shards of each model, read ``weights_only`` (``trinity_verl.checkpoint``): a
        shard holding other objects is refused (``CheckpointRefused``) and runs nothing."""
        with weights_only_loads():
            for name, worker, _ in self._savers():
                worker.load_checkpoint(f"{directory}/{name}")

    def weights(self) -> dict[str, torch.Tensor] | None:
        """The actor's full weights (gathered from the FSDP shards) as a CPU state dict on rank 0;
        with LoRA its adapter's tensors alone (peft's ``adapter_model.safetensors`` names)."""
        import torch.distributed as dist

        keep = dist.get_rank() == 0
        # base_sync_done: the rollout engine holds the base already, verl sends the adapter alone
        params, _ = self.actor.actor.engine.get_per_tensor_param(base_sync_done=bool(self.config.model.lora_configs))
        full = {}
        for name, tensor in params:  # every rank iterates: each tensor is all-gathered
            if keep:
                full[name] = tensor.detach().to("cpu", copy=True)
        return full if keep else None

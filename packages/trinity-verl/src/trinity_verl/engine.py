"""The verl FSDP training engine (``trainer.trainer_type: verl``).

Drives verl 0.9.1's workers in this process (world size 1: the trainer actor's own
process; Ray worker groups across several GPUs are not wired yet): an
``ActorRolloutRefWorker`` with role ``actor`` and, when the algorithm needs one, another with
role ``ref``; a ``TrainingWorker`` for a ``value_model`` critic. verl owns the model, FSDP,
micro-batching (fixed size or ``use_dynamic_bsz`` token budgets), optimizer, LR schedule,
gradient clipping and checkpoints; the losses are trinity's own (``trinity.engine.losses``,
the functions the torch reference engine uses), so both engines share one numerical truth.

A step hands verl the whole batch as one mini-batch (one optimizer step per
``ppo_epochs``), as the torch engine does. verl's loss callback sees a micro-batch; it
carries the row numbers of the trinity batch, whose fields the algorithm functions read.
A batch that does not divide by the data-parallel size (times the micro-batch sizes, without
dynamic batching) is padded with copies of its first row whose response mask is zero: they add
nothing to any loss or share.

On a machine without CUDA ``trinity_verl.cpu`` gives verl a CPU platform (gloo, fp32,
FSDP2, sdpa attention). Checkpoints are verl's (``<dir>/actor``, ``<dir>/critic``: sharded
model, optimizer, extra state) plus the HF export in ``<dir>/actor/huggingface``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from trinity.common.batch import Batch
from trinity.config.check import trainer_gpu_num
from trinity.config.schema import Config
from trinity.engine.base import Metrics, TrainingEngine
from trinity.engine.losses import LossFns, Totals, batch_totals, critic_micro_loss
from trinity.plugins import Kind, resolve
from trinity_verl import cpu
from trinity_verl.config import verl_config
from trinity_verl.distributed import init_process_group

logger = logging.getLogger(__name__)

MICRO_BATCH_SIZES = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
    "critic.forward_micro_batch_size_per_gpu",
)
STATE_FILE = "trinity_state.json"
"""Step counters of a checkpoint (verl's extra state has the RNG and LR scheduler, not these)."""


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


class VerlTrainingEngine(TrainingEngine):
    """Actor, reference and critic updates through verl's FSDP workers."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cpu":
            cpu.enable_cpu()
        else:
            init_process_group("cpu:gloo,cuda:nccl")
        self.verl: DictConfig = verl_config(config, self.device)
        if trainer_gpu_num(config) > 1:
            logger.warning(
                "trinity-verl trains on one device (world size 1) for now; the other %d trainer GPUs stay idle",
                trainer_gpu_num(config) - 1,
            )
        # HF weights in every checkpoint: checkpoint weight sync and the next stage load them
        self.verl.actor_rollout_ref.actor.checkpoint.save_contents = ["model", "optimizer", "extra", "hf_model"]
        self.algorithm = resolve(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type)
        if self.algorithm.data_schema == "dpo" and (config.trainer.use_dynamic_bsz or self._odd_micro_batches()):
            raise ValueError(
                "DPO on trainer_type verl keeps chosen/rejected pairs in one micro-batch only with "
                "trainer.use_dynamic_bsz: false and even micro-batch sizes"
            )
        self.losses = LossFns.from_config(config)
        self.global_step = 0
        self._batch: Batch | None = None  # the batch of the update under way, for the loss callbacks
        self._totals: Totals | None = None
        self._metrics = _Accumulator(1)

        self.actor = self._worker("actor")
        self.actor.set_loss_fn(self._actor_loss)
        algo = config.algorithm
        needs_ref = self.algorithm.use_reference or {algo.kl_loss_fn, algo.kl_penalty_fn} - {None, "none"}
        self.reference = self._worker("ref") if needs_ref else None
        self.critic = self._critic() if self.algorithm.use_critic else None

    @classmethod
    def native_config(cls, config: Config) -> dict[str, Any]:
        """The verl config (resolved) the engine would run with on a GPU."""
        return OmegaConf.to_container(verl_config(config, "cuda"), resolve=True)

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

    def _dp_size(self) -> int:
        return self.actor.actor.engine.get_data_parallel_size()

    def _micro_batch_sizes(self) -> list[int]:
        return [int(size) for size in (OmegaConf.select(self.verl, key) for key in MICRO_BATCH_SIZES) if size]

    def _odd_micro_batches(self) -> bool:
        return any(size % 2 for size in self._micro_batch_sizes())

    def _row_unit(self) -> int:
        """What a batch's row count must divide by: the DP size, times (without dynamic batching)
        every micro-batch size, since verl splits each rank's rows into equal micro-batches."""
        if self.config.trainer.use_dynamic_bsz:
            return self._dp_size()
        return self._dp_size() * math.lcm(*self._micro_batch_sizes())

    def _padded(self, batch: Batch) -> Batch:
        """``batch`` plus copies of row 0 with an empty response mask, to a multiple of ``_row_unit``."""
        missing = -batch.batch_size % self._row_unit()
        if not missing:
            return batch
        filler = batch.select([0] * missing)
        filler = filler.with_fields(response_mask=torch.zeros_like(filler.response_mask))
        fields = {name: getattr(batch, name) for name in batch.__dataclass_fields__}
        return Batch(**{k: (torch.cat([v, getattr(filler, k)]) if v is not None else None) for k, v in fields.items()})

    def _tensordict(self, batch: Batch, **meta: Any) -> Any:
        """verl's no-padding TensorDict of ``batch`` (rows numbered), temperature 1 (raw logprobs)."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        td = tu.get_tensordict(
            {
                "input_ids": batch.input_ids,
                "attention_mask": batch.attention_mask,
                "position_ids": batch.position_ids,
                "prompts": batch.input_ids[:, : batch.prompt_width],
                "responses": batch.responses,
                "response_mask": batch.response_mask,
                "rows": torch.arange(batch.batch_size),
            },
            non_tensor_dict={"temperature": 1.0, **meta},
        )
        return left_right_2_no_padding(td)

    def _per_token(self, call: Any, batch: Batch, key: str) -> torch.Tensor:
        """``[B, R]`` output ``key`` of a forward-only worker call on ``batch``."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        padded = self._padded(batch)
        td = self._tensordict(padded, calculate_entropy=False, compute_loss=False)
        out = no_padding_2_padding(tu.get(call(td), key), td)
        return out[: batch.batch_size].float().cpu()

    # -- forward passes -------------------------------------------------------------------

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        return self._per_token(self.actor.compute_log_prob, batch, "log_probs")

    def compute_ref_logprobs(self, batch: Batch) -> torch.Tensor:
        if self.reference is None:
            raise RuntimeError(f"algorithm '{self.algorithm.name}' with no KL function has no reference model")
        return self._per_token(self.reference.compute_ref_log_prob, batch, "log_probs")

    def compute_values(self, batch: Batch) -> torch.Tensor:
        if self.critic is None:
            raise RuntimeError(f"algorithm '{self.algorithm.name}' has no critic")
        return self._per_token(self.critic.infer_batch, batch, "values")

    # -- updates --------------------------------------------------------------------------

    def train_step(self, batch: Batch) -> Metrics:
        from verl.utils import tensordict_utils as tu

        batch = self.prepare_batch(batch)
        if self.critic is not None and batch.returns is None:
            raise ValueError("the critic needs batch.returns: run the advantage function (e.g. ppo/GAE) first")
        self._batch = self._padded(batch)
        self._totals = batch_totals(batch)
        size = self._batch.batch_size
        metrics: Metrics = {}
        parts = [("critic", self.critic, "critic")] if self.critic is not None else []
        parts.append(("actor", self.actor, "actor_rollout_ref.actor"))
        for name, worker, section in parts:
            epochs = int(OmegaConf.select(self.verl, f"{section}.ppo_epochs"))
            self._metrics = _Accumulator(epochs)
            td = self._tensordict(
                self._batch,
                calculate_entropy=name == "actor",
                compute_loss=True,
                global_batch_size=size,
                mini_batch_size=size,
                epochs=epochs,
                seed=int(OmegaConf.select(self.verl, f"{section}.data_loader_seed")),
                dataloader_kwargs={"shuffle": False},
            )
            update = worker.update_actor if name == "actor" else worker.train_mini_batch
            out = tu.get(update(td), "metrics")
            norms = out.get("grad_norm", [])
            metrics.update({f"{name}/{k}": v for k, v in self._metrics.sums.items()})
            metrics[f"{name}/grad_norm"] = float(sum(norms) / len(norms)) if norms else 0.0
            lrs = out.get("lr", [])
            if lrs:
                metrics[f"{name}/lr"] = float(lrs[-1])
        self._batch = self._totals = None
        self.global_step += 1
        return metrics

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

    # -- checkpoints and sync -------------------------------------------------------------

    def _savers(self) -> list[tuple[str, Any]]:
        parts: list[tuple[str, Any]] = [("actor", self.actor)]
        if self.critic is not None:
            parts.append(("critic", self.critic))
        return parts

    def save_checkpoint(self, directory: str, step: int) -> None:
        for name, worker in self._savers():
            worker.save_checkpoint(str(Path(directory) / name), global_step=step)
        state = {"step": step, "global_step": self.global_step}
        (Path(directory) / STATE_FILE).write_text(json.dumps(state))

    def load_checkpoint(self, directory: str) -> int:
        for name, worker in self._savers():
            worker.load_checkpoint(str(Path(directory) / name))
        state = json.loads((Path(directory) / STATE_FILE).read_text())
        self.global_step = state["global_step"]
        return state["step"]

    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The actor's full weights (gathered from the FSDP shards) as a CPU state dict."""
        params, _ = self.actor.actor.engine.get_per_tensor_param()
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in params}

"""The reference training engine: plain torch on a CPU or one GPU (fp32 weights, bf16 autocast on a GPU).

The actor; a frozen reference when the algorithm needs one (with LoRA, the actor with its
adapter disabled); a critic for ``ppo`` (``modeling.load_critic``). ``train_step`` fills what
the batch lacks (``prepare_batch``), then runs ``ppo_epochs`` optimizer steps, each over
gradient-accumulated micro-batches. Checkpoints are HF folders plus ``extra_state.pt``.
docs/engines.md gives the micro-batching, loss weights, LR schedules, the ``trainer_config``
keys read and the checkpoint layout.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import get_scheduler

from trinity.common.batch import Batch
from trinity.config.schema import Config, OptimizerConfig
from trinity.model.engines import Metrics, TrainingEngine, load_plain_state
from trinity.model.lora import adapter_state, describe_adapter, with_adapter
from trinity.model.moe_routing import replay_routing, require_moe
from trinity.model.multimodal import MediaInputs, collate_media
from trinity.model.tokenization import load_tokenizer
from trinity.model.torch_model import (
    HF_SUBDIR,
    default_device,
    entropy_scores,
    load_critic,
    load_model,
    load_weights_into,
    model_dtype,
    read_hf_weights,
    response_logits,
    token_logprobs,
)
from trinity.plugins import Kind, resolve
from trinity.training.losses import LossFns, Totals, batch_totals, critic_micro_loss, role_metrics

logger = logging.getLogger(__name__)

MicroLoss = Callable[[Batch], tuple[torch.Tensor, Metrics, float]]
"""``micro-batch on the device -> (loss weighted by its share, metrics, metrics weight)``."""


@dataclass(frozen=True)
class TorchEngineArgs:
    """The keys of ``trainer.trainer_config`` this engine reads (see the module docstring)."""

    ppo_epochs: int = 1
    critic_lr: float | None = None
    cliprange_value: float = 0.5

    @classmethod
    def from_trainer_config(cls, raw: dict[str, Any] | None) -> TorchEngineArgs:
        raw = raw or {}
        actor = raw.get("actor") or (raw.get("actor_rollout_ref") or {}).get("actor") or {}
        critic = raw.get("critic") or {}
        return cls(
            ppo_epochs=int(actor.get("ppo_epochs", cls.ppo_epochs)),
            critic_lr=(critic.get("optim") or {}).get("lr"),
            cliprange_value=float(critic.get("cliprange_value", cls.cliprange_value)),
        )


def optimizer_for(
    model: torch.nn.Module, opt: OptimizerConfig, lr: float, run_steps: int | None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The optimizer of ``model``'s trainable parameters and its LR schedule, as verl's: linear
    warmup from 0 over ``lr_warmup_steps`` (or ``lr_warmup_steps_ratio`` of the total), then
    ``constant`` or ``cosine`` (half a cosine down to ``min_lr_ratio`` at the total:
    ``total_training_steps``, else the run's ``run_steps``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kind = opt.optimizer_type.lower()
    if kind in ("adamw", "adam"):  # Trinity-RFT's adam is AdamW, as verl builds it
        optimizer = torch.optim.AdamW(params, lr=lr, betas=tuple(opt.betas), weight_decay=opt.weight_decay)
    elif kind == "sgd":
        optimizer = torch.optim.SGD(params, lr=lr, weight_decay=opt.weight_decay)
    else:
        raise ValueError(
            f"algorithm.optimizer.optimizer_type {opt.optimizer_type!r}: the torch engine has adamw, adam, sgd"
        )
    total = opt.total_training_steps if opt.total_training_steps > 0 else (run_steps or 0)
    warmup = opt.lr_warmup_steps if opt.lr_warmup_steps > 0 else int(opt.lr_warmup_steps_ratio * total)
    if opt.lr_scheduler_type == "constant":
        return optimizer, get_scheduler("constant_with_warmup", optimizer, num_warmup_steps=warmup)
    if total <= 0:
        raise ValueError("a cosine LR schedule needs algorithm.optimizer.total_training_steps or trainer.total_steps")
    cosine = {"min_lr_rate": opt.min_lr_ratio}
    return optimizer, get_scheduler("cosine_with_min_lr", optimizer, warmup, total, scheduler_specific_kwargs=cosine)


def _offload_gradients(model: torch.nn.Module, held: dict[torch.nn.Parameter, torch.Tensor]) -> None:
    """Add the micro-batch's gradients to ``held`` on the CPU and free them on the device."""
    for param in model.parameters():
        if param.grad is not None:
            grad = param.grad.to("cpu")
            held[param] = held[param].add_(grad) if param in held else grad
            param.grad = None


def _zero_missing_gradients(model: torch.nn.Module) -> None:
    """A trainable parameter no row reached (or none ran backward: all spared or empty) steps on
    a zero gradient, as under verl's FSDP: momentum and weight decay act on it."""
    for param in model.parameters():
        if param.requires_grad and param.grad is None:
            param.grad = torch.zeros_like(param)


def grad_through_rows(
    forward: Callable[[Batch], tuple[torch.Tensor, torch.Tensor]], mb: Batch, rows: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``forward(mb)`` (logprobs and entropy ``[b, R]``) with autograd only through ``rows`` (None:
    all). The other rows add nothing to the gradient, so they take a forward pass alone, for the
    loss's value and metrics: late in a GRPO run most groups score alike, and the backward pass
    is most of a step."""
    if rows is None or bool(rows.all()):
        return forward(mb)
    learn, spare = rows.cpu().nonzero().flatten(), (~rows).cpu().nonzero().flatten()  # row lists index on the CPU
    with torch.no_grad():
        spared = forward(mb.select(spare))
    if not learn.numel():
        return spared
    learned = forward(mb.select(learn))
    order = torch.argsort(torch.cat([learn, spare]))
    return torch.cat([learned[0], spared[0]])[order], torch.cat([learned[1], spared[1]])[order]


def micro_batches(
    lengths: torch.Tensor, unit: int = 1, max_rows: int | None = None, max_tokens: int | None = None
) -> list[torch.Tensor]:
    """Row indices of the micro-batches of a batch whose rows have ``lengths`` tokens.

    Rows move in units of ``unit`` consecutive rows (2 keeps DPO pairs). With ``max_tokens``
    units go longest first into micro-batches of at most ``max_tokens`` padded tokens (rows x
    longest row; a unit longer than that goes alone); otherwise consecutive groups of
    ``max_rows`` rows (rounded down to whole units, at least one).
    """
    n_units = lengths.numel() // unit
    unit_rows = torch.arange(n_units * unit).view(n_units, unit)
    if max_tokens is None:
        per = max(1, (max_rows or n_units) // unit)
        return [unit_rows[i : i + per].flatten() for i in range(0, n_units, per)]
    unit_len = lengths.view(n_units, unit).max(dim=1).values
    order = torch.argsort(unit_len, descending=True, stable=True).tolist()
    sizes = unit_len.tolist()
    groups: list[list[int]] = []
    for u in order:
        if groups and (len(groups[-1]) + 1) * unit * sizes[groups[-1][0]] <= max_tokens:
            groups[-1].append(u)
        else:
            groups.append([u])
    return [unit_rows[g].flatten() for g in groups]


def _trimmed(mb: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """The micro-batch's used columns: ``input_ids, attention_mask, position_ids``, the
    trimmed prompt width and response width."""
    used = mb.attention_mask.any(dim=0).nonzero()
    prompt = mb.prompt_width
    start = min(int(used[0]), prompt - 1) if used.numel() else prompt - 1
    end = max(int(used[-1]) + 1, prompt) if used.numel() else prompt
    cols = slice(start, end)
    return mb.input_ids[:, cols], mb.attention_mask[:, cols], mb.position_ids[:, cols], prompt - start, end - prompt


def _media(mb: Batch) -> MediaInputs | None:
    """The micro-batch's image tensors as one forward pass takes them; None for text rows."""
    return collate_media(mb.multi_modal_inputs) or None if mb.multi_modal_inputs is not None else None


def _routing(model: torch.nn.Module, mb: Batch, input_ids: torch.Tensor, prompt: int, replay: bool) -> Any:
    """With ``replay``, ``model``'s forward of ``input_ids`` (the micro-batch's columns from ``prompt``
    before its responses, ``_trimmed``) routes as the rollout did where it recorded the routing."""
    if not replay or mb.routed_experts is None:
        return replay_routing(model, None)
    start = mb.prompt_width - prompt
    return replay_routing(model, mb.routed_experts[:, start : start + input_ids.shape[1]])


def _pad_to(values: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(values, (0, width - values.shape[1]))


class TorchTrainingEngine(TrainingEngine):
    """Actor (and critic) updates with the configured algorithm functions."""

    takes_lora = True
    takes_images = True
    offloads_gradients = True
    replays_routing = True

    def __init__(self, config: Config) -> None:
        self.config = config
        algo_cfg, trainer = config.algorithm, config.trainer
        self.algorithm = resolve(Kind.ALGORITHM_TYPE, algo_cfg.algorithm_type)
        self.args = TorchEngineArgs.from_trainer_config(trainer.trainer_config)
        self.losses = LossFns.from_config(config)
        self.device = default_device()
        self.global_step = 0

        path, remote_code = config.model.model_path, config.model.trust_remote_code
        self.tokenizer = load_tokenizer(config.model).tokenizer  # saved with each checkpoint
        self.actor = load_model(path, torch.float32, remote_code, (config.model.rope_scaling, config.model.rope_theta))
        self.lora = (config.model.lora_configs or [None])[0]
        if self.lora is not None:
            self.actor = with_adapter(self.actor, self.lora, trainable=True)
            logger.info("LoRA adapter %r trains and syncs alone: %s", self.lora.name, describe_adapter(self.actor))
        self.actor.to(self.device).train()
        self.router_replay = algo_cfg.enable_router_replay
        if self.router_replay:
            require_moe(self.actor, path)
        self.reference: torch.nn.Module | None = None
        if self.algorithm.needs_reference(algo_cfg.kl_loss_fn, algo_cfg.kl_penalty_fn):
            # with LoRA the base model is the reference: the actor with its adapter disabled
            self.reference = self.actor if self.lora else copy.deepcopy(self.actor).eval().requires_grad_(False)
        opt, steps = algo_cfg.optimizer, trainer.total_steps
        self.actor_optimizer, self.actor_scheduler = optimizer_for(self.actor, opt, opt.lr, steps)

        self.critic: torch.nn.Module | None = None
        if self.algorithm.use_critic:
            self.critic = load_critic(config.model.critic_model_path or path, remote_code).to(self.device).train()
            critic_lr = self.args.critic_lr if self.args.critic_lr is not None else opt.lr
            self.critic_optimizer, self.critic_scheduler = optimizer_for(self.critic, opt, critic_lr, steps)

    # -- forward passes -------------------------------------------------------------------

    def _autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    def _logprobs(
        self, model: torch.nn.Module, mb: Batch, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Response logprobs (and entropy) ``[b, R]`` of a micro-batch, zero past its used columns."""
        input_ids, mask, positions, prompt, width = _trimmed(mb)
        full = mb.responses.shape[1]
        if width == 0:
            zeros = torch.zeros_like(mb.response_mask, dtype=torch.float32)
            return zeros, (zeros if with_entropy else None)
        with self._autocast(), _routing(model, mb, input_ids, prompt, self.router_replay):
            logprobs, entropy = token_logprobs(model, input_ids, mask, positions, width, with_entropy, _media(mb))
        return _pad_to(logprobs, full), (_pad_to(entropy, full) if entropy is not None else None)

    def _values(self, mb: Batch) -> torch.Tensor:
        """Critic values ``[b, R]``: the value head at the position before each response token."""
        input_ids, mask, positions, prompt, width = _trimmed(mb)
        if mb.multi_modal_inputs is not None:
            raise ValueError(
                "the torch engine's critic (ppo) takes no images: use an algorithm without a critic (grpo)"
            )
        with self._autocast():
            out = self.critic(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False)
        return _pad_to(out.logits[:, prompt - 1 : prompt - 1 + width, 0].float(), mb.responses.shape[1])

    def _micro_batches(self, batch: Batch) -> list[torch.Tensor]:
        trainer = self.config.trainer
        budget = trainer.max_token_len_per_gpu if trainer.use_dynamic_bsz else None
        unit = 2 if self.algorithm.data_schema == "dpo" else 1
        lengths = batch.attention_mask.sum(dim=1)
        return micro_batches(lengths, unit, trainer.micro_batch_size_per_gpu, budget)

    def _entropy_scores(self, mb: Batch) -> torch.Tensor:
        """``[b, R, 2]``: the actor's ``entropy_scores``, zero past the used columns."""
        input_ids, mask, positions, prompt, width = _trimmed(mb)
        scores = torch.zeros((*mb.response_mask.shape, 2), dtype=torch.float32, device=mb.response_mask.device)
        if width:
            with self._autocast(), _routing(self.actor, mb, input_ids, prompt, self.router_replay):
                logits = response_logits(self.actor, input_ids, mask, positions, width, _media(mb))
            scores[:, :width] = entropy_scores(logits, input_ids[:, -width:])
        return scores

    @torch.no_grad()
    def _per_token(self, batch: Batch, compute: Callable[[Batch], torch.Tensor]) -> torch.Tensor:
        """``compute`` over the micro-batches, reassembled to ``[B, R, ...]`` in the batch's order."""
        out = None
        for index in self._micro_batches(batch):
            values = compute(batch.select(index).to(self.device))
            if out is None:
                out = torch.zeros((batch.batch_size, *values.shape[1:]), device=batch.responses.device)
            out[index] = values.to(out.device).float()
        return out

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        return self._per_token(batch, lambda mb: self._logprobs(self.actor, mb)[0])

    def compute_ref_logprobs(self, batch: Batch) -> torch.Tensor:
        """Reference-model logprobs ``[B, R]`` (for KL losses and penalties, DPO), routed by the reference
        itself (router replay makes the actor's forwards the rollout's, as verl's R3)."""
        if self.reference is None:
            raise RuntimeError(f"algorithm '{self.algorithm.name}' with no KL function has no reference model")
        batch = batch.with_fields(routed_experts=None)
        if self.lora is not None:
            with self.actor.disable_adapter():
                return self._per_token(batch, lambda mb: self._logprobs(self.actor, mb)[0])
        return self._per_token(batch, lambda mb: self._logprobs(self.reference, mb)[0])

    def compute_entropy_scores(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self._per_token(batch, self._entropy_scores)
        return scores[..., 0], scores[..., 1]

    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Critic values ``[B, R]`` (for GAE advantages and value clipping)."""
        if self.critic is None:
            raise RuntimeError(f"algorithm '{self.algorithm.name}' has no critic")
        return self._per_token(batch, self._values)

    # -- updates --------------------------------------------------------------------------

    def train_step(self, batch: Batch) -> Metrics:
        batch = self.prepare_batch(batch)
        parts = self._micro_batches(batch)
        totals = batch_totals(batch)
        metrics: Metrics = {}
        if self.critic is not None:
            if batch.returns is None:
                raise ValueError("the critic needs batch.returns: run the advantage function (e.g. ppo/GAE) first")
            critic = self._update(self.critic, self.critic_optimizer, batch, parts, self._critic_loss(totals))
            metrics.update({f"critic/{k}": v for k, v in critic.items()})
        if self.trains_actor(self.config.trainer.critic_warmup):
            actor = self._update(self.actor, self.actor_optimizer, batch, parts, self._actor_loss(totals))
            metrics.update(role_metrics("actor", actor))
            metrics["actor/lr"] = self.actor_scheduler.get_last_lr()[0]
            self.actor_scheduler.step()
        if self.critic is not None:
            metrics["critic/lr"] = self.critic_scheduler.get_last_lr()[0]
            self.critic_scheduler.step()
        self.global_step += 1
        return metrics

    def _update(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: Batch,
        parts: list[torch.Tensor],
        micro_loss: MicroLoss,
    ) -> Metrics:
        """``ppo_epochs`` optimizer steps, each over all micro-batches; averaged metrics."""
        sums: dict[str, float] = {}
        norms = []
        for _ in range(self.args.ppo_epochs):
            optimizer.zero_grad(set_to_none=True)
            held: dict[torch.nn.Parameter, torch.Tensor] = {}  # trainer.grad_offload: the sums on the CPU
            for index in parts:
                loss, micro_metrics, weight = micro_loss(batch.select(index).to(self.device))
                if loss.requires_grad:  # not when every response of the micro-batch is empty
                    loss.backward()
                    if self.config.trainer.grad_offload:
                        _offload_gradients(model, held)
                for key, value in micro_metrics.items():
                    sums[key] = sums.get(key, 0.0) + weight * value / self.args.ppo_epochs
            for param, grad in held.items():
                param.grad = grad.to(param.device)
            _zero_missing_gradients(model)
            clip = self.config.trainer.grad_clip
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip and clip > 0 else math.inf)
            if torch.isfinite(norm):
                optimizer.step()
            norms.append(float(norm))
        return {**sums, "grad_norm": sum(norms) / len(norms)}

    def _actor_loss(self, totals: Totals) -> MicroLoss:
        def loss(mb: Batch) -> tuple[torch.Tensor, Metrics, float]:
            forward = functools.partial(self._logprobs, self.actor, with_entropy=True)
            logprobs, entropy = grad_through_rows(forward, mb, self.losses.gradient_rows(mb))
            return self.losses.actor_micro_loss(logprobs, entropy, mb, totals)

        return loss

    def _critic_loss(self, totals: Totals) -> MicroLoss:
        mode, clip = self.config.algorithm.loss_agg_mode, self.args.cliprange_value

        def loss(mb: Batch) -> tuple[torch.Tensor, Metrics, float]:
            return critic_micro_loss(self._values(mb), mb, totals, mode, clip)

        return loss

    # -- checkpoints and sync -------------------------------------------------------------

    def _parts(self) -> list[tuple[str, torch.nn.Module, torch.optim.Optimizer, Any]]:
        parts = [("actor", self.actor, self.actor_optimizer, self.actor_scheduler)]
        if self.critic is not None:
            parts.append(("critic", self.critic, self.critic_optimizer, self.critic_scheduler))
        return parts

    def save_checkpoint(self, directory: str, step: int, hf_weights: bool = True) -> None:
        for name, model, optimizer, scheduler in self._parts():
            root = Path(directory) / name
            model.save_pretrained(root / HF_SUBDIR)
            self.tokenizer.save_pretrained(root / HF_SUBDIR)
            state = {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "step": step,
                "global_step": self.global_step,
            }
            torch.save(state, root / "extra_state.pt")

    def load_checkpoint(self, directory: str) -> int:
        step = 0
        for name, model, optimizer, scheduler in self._parts():
            root = Path(directory) / name
            load_weights_into(model, read_hf_weights(root / HF_SUBDIR))
            state = load_plain_state(root / "extra_state.pt")
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["rng"])
            if state["cuda_rng"] is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["cuda_rng"])
            step, self.global_step = state["step"], state["global_step"]
        return step

    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """A CPU snapshot of the actor's weights (copied: training goes on updating them), each
        tensor once (a tied LM head is the embedding; ``save_pretrained`` writes it once too), cast
        on the device to the dtype the rollout engine holds them in (``rollout_model.dtype`` on a
        GPU, bf16 by default): half float32's bytes to copy and hand over (docs/performance.md).
        With LoRA, the adapter's tensors alone (``adapter_model.safetensors``' names)."""
        rollout = model_dtype(self.device, self.config.explorer.rollout_model.dtype)
        snapshot: dict[str, torch.Tensor] = {}
        seen: set[int] = set()
        weights = adapter_state(self.actor) if self.lora is not None else self.actor.state_dict()
        for name, tensor in weights.items():
            if tensor.numel() and tensor.data_ptr() in seen:
                continue
            seen.add(tensor.data_ptr())
            dtype = rollout if tensor.is_floating_point() and rollout != "auto" else tensor.dtype
            snapshot[name] = tensor.detach().to(dtype).to("cpu", copy=True)
        return snapshot

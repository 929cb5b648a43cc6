"""The trainer's GPU memory, estimated before a run: Trinity-RFT's ``GPUMemoryValidator``.

When the checking machine has a CUDA device and the trainer runs (mode train or both), its peak
on one GPU is estimated from the model's shape (counted on the meta device: no weights read),
``trainer.max_token_len_per_gpu`` and the trainer's GPUs, with Trinity-RFT's FSDP formulas (bf16
weights and gradients, fp32 Adam state sharded, activations as with gradient checkpointing).
Above 80% of the device (90% with ``expandable_segments:True``) the check warns and ``trinity
run`` refuses, naming what lowers it; ``ignore_validator_suggestions: true`` skips it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trinity.common.lazy_import import lazy_module
from trinity.config.load import IssueCollector
from trinity.config.schema import Config

torch = lazy_module("torch")
transformers = lazy_module("transformers")

KEY = "ignore_validator_suggestions"
GIB = 1024**3


@dataclass(frozen=True)
class ModelShape:
    """What the estimate reads of a model."""

    params: int
    hidden_size: int
    num_layers: int
    vocab_size: int


def model_shape(model_path: str) -> ModelShape:
    """The parameter count and sizes of the local model at ``model_path``, built on the meta device."""
    config = transformers.AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    params = sum(p.numel() for p in model.parameters())
    return ModelShape(params, text.hidden_size, text.num_hidden_layers, text.vocab_size)


def trainer_peak_bytes(config: Config, shape: ModelShape) -> float:
    """Peak bytes on one trainer GPU: sharded weights, gradients and Adam state, plus the larger of
    a micro-batch's activations and the optimizer step's buffers (Trinity-RFT's FSDP formulas)."""
    trainer, params = config.trainer, shape.params
    shards = max(1, config.cluster.trainer_gpu_num)
    weights = 0.0 if trainer.param_offload or trainer.offload_policy else 2 * params / shards
    optimizer = 0.0 if trainer.optimizer_offload or trainer.offload_policy else (12 + 2) * params / shards
    tokens, hidden = trainer.max_token_len_per_gpu or 0, shape.hidden_size
    hidden_states = 2 * tokens * hidden * (shape.num_layers + 4)
    logits = (8 if config.algorithm.entropy_loss_fn != "none" else 10) * tokens * shape.vocab_size
    backward = 4 * shape.vocab_size * hidden + 80 * tokens * hidden
    activations = hidden_states + max(logits, backward)
    optimizer_step = 4 * params / shards
    return weights + optimizer + max(activations, optimizer_step)


def device_memory() -> int | None:
    """Bytes of this machine's first CUDA device; None without one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory


def check_gpu_memory(config: Config, issues: IssueCollector) -> None:
    """Refuse to run a trainer whose estimated peak exceeds the safe share of a GPU (see the module)."""
    if config.ignore_validator_suggestions or config.mode not in ("train", "both"):
        return
    if not config.cluster.trainer_gpu_num:
        return  # a trainer on CPUs; asking CUDA would import torch into the driver (about 2 s)
    if not (Path(config.model.model_path) / "config.json").is_file():
        return  # not a local model: its shape would have to be downloaded
    capacity = device_memory()
    if capacity is None:
        return
    try:
        shape = model_shape(config.model.model_path)
    except (OSError, ValueError, KeyError) as exc:
        issues.warn(KEY, f"the trainer's GPU memory was not estimated: {exc}")
        return
    share = 0.9 if os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") == "expandable_segments:True" else 0.8
    peak = trainer_peak_bytes(config, shape)
    if peak > share * capacity:
        issues.refuse_at_run(
            KEY,
            f"the trainer needs about {peak / GIB:.1f} GiB of a GPU (a {shape.params / 1e9:.2f}B-parameter model, "
            f"{config.trainer.max_token_len_per_gpu} tokens a micro-batch, {max(1, config.cluster.trainer_gpu_num)} "
            f"trainer GPUs), more than {share:.0%} of its {capacity / GIB:.1f} GiB: lower "
            "trainer.max_token_len_per_gpu, set trainer.param_offload / optimizer_offload, or give the trainer "
            "more GPUs; set ignore_validator_suggestions: true to run anyway",
        )

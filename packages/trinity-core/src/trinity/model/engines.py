"""Interfaces of the engines: rollout (explorer side) and training (trainer side).

The reference engines of trinity-core (transformers / torch, CPU or one GPU) and the
plugin engines (trinity-vllm, trinity-verl) implement these. Constructor convention:
a rollout engine is ``Engine(config: InferenceModelConfig, model: ModelConfig)`` (its own
section plus the global model limits and chat settings); a training engine is
``Engine(config: Config)``.
"""

from __future__ import annotations

import contextlib
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from trinity.common.batch import Batch
from trinity.common.errors import first_line
from trinity.config.schema import Config

if TYPE_CHECKING:
    import torch

    from trinity.model.tokenization import ChatTokenizer

Metrics = dict[str, float]


@dataclass
class SamplingArgs:
    """Per-call sampling settings; None falls back to the model config."""

    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    min_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = True
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None
    """OpenAI tool schemas the chat template offers the model (``chat`` only)."""


@dataclass
class Completion:
    """One sampled response of a prompt."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    text: str
    finish_reason: str
    """``stop`` or ``length``."""
    truncated_from: int | None = None
    """The prompt's length before ``max_prompt_tokens`` cut it (nothing was generated); None: it fit."""
    model_version: int = 0
    multi_modal_inputs: dict[str, torch.Tensor] | None = None
    """The image tensors the model took beside the prompt (``trinity.model.multimodal``); None: text only."""
    routed_experts: torch.Tensor | None = None
    """MoE routing of prompt and response (``Experience.routed_experts``); None: not recorded."""
    token_versions: list[int] | None = None
    """With partial rollout, the weights' version that sampled each response token (``model_version``
    is the first's); None without it."""

    @property
    def prompt_truncated(self) -> bool:
        return self.truncated_from is not None


class EngineStartError(RuntimeError):
    """A rollout engine could not start; the message names the engine (or its config key) and the cause."""


class EngineCrashed(RuntimeError):
    """A rollout engine's process died. Workflows do not retry it: the explorer restarts a
    ``restartable`` engine, loads the newest weights into it and runs the batch again (a few
    times at most); otherwise the step fails and the run stops (experiences already written
    stay in the buffer)."""


class RolloutEngine(ABC):
    """Generates responses with logprobs; receives new weights from the trainer.

    The batch methods (``generate``, ``chat``, ``logprobs``) take many items per call; the
    explorer's ``EngineClient`` merges concurrent requests into them, one call at a time. A
    ``concurrent`` engine schedules requests itself (continuous batching) and implements the
    ``*_async`` methods too: the client then sends each request as it comes, many in flight.
    """

    model_version: int = 0
    chat_tokenizer: ChatTokenizer | None = None
    """The engine's tokenisation (``load_tokenizer``: chat template, prompt limit); workflows
    re-tokenise their conversations with it. None for an engine that sees no tokens (external)."""
    api_url: str | None = None
    """Base URL of the engine's OpenAI-compatible endpoint (``enable_openai_api``); None
    where it serves none."""
    api_key: str | None = None
    """The bearer token that endpoint requires (``api_key``); None where it requires none."""
    concurrent: ClassVar[bool] = False
    """Whether requests go to the ``*_async`` methods as they come, many at once."""
    takes_weights: ClassVar[bool] = True
    """Whether ``update_weights`` applies (an external server owns its model: no weight sync)."""
    restartable: ClassVar[bool] = False
    """Whether ``restart`` can bring the engine back after its process died."""
    offloads_gradients: ClassVar[bool] = False
    """Whether the engine keeps accumulated gradients on the CPU between micro-batches (``trainer.grad_offload``)."""
    takes_lora: ClassVar[bool] = False
    """Whether the engine holds the base model with the LoRA adapter of ``model.lora_configs``,
    whose tensors alone ``update_weights`` then receives (``trinity.model.lora``)."""
    records_routing: ClassVar[bool] = False
    """Whether the engine records the MoE routing of each completion (``enable_return_routed_experts``,
    for router replay: ``trinity.model.moe_routing``)."""
    takes_parallel_keys: ClassVar[bool] = False
    """Whether one engine spreads over several GPUs as the model's ``data_parallel_size``,
    ``pipeline_parallel_size`` and ``enable_expert_parallel`` say; the checker refuses them set for another."""
    takes_partial_rollout: ClassVar[bool] = False
    """Whether ``update_weights`` may run beside a sampling call, pausing it and resuming its unfinished
    responses with the new weights (``synchronizer.partial_rollout``); the checker refuses the key for another."""
    partial_rollout: bool = False
    """Set on the rollout model's engines when ``synchronizer.partial_rollout`` is on: the explorer's
    client then calls ``update_weights`` at once, not after the sampling call in progress."""
    crashed: bool = False
    """Set by an engine whose process died (it raised ``EngineCrashed``), until ``restart``."""
    in_explorer_process: ClassVar[bool] = True
    """Whether the engine computes in the explorer's own process, whose Ray actor then asks for
    the engine's GPUs (``trinity.placement``); False for an engine that starts Ray actors of its
    own that ask for them (vLLM)."""

    @abstractmethod
    def generate(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        """``args.n`` completions for each prompt (raw text, no chat template)."""

    @abstractmethod
    def chat(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        """``args.n`` completions for each conversation, through the chat template (offering ``args.tools``)."""

    @abstractmethod
    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Logprob of every token given its prefix (first token: 0.0)."""

    async def generate_async(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        """``generate`` of a ``concurrent`` engine, awaited per request."""
        raise NotImplementedError(f"{type(self).__name__} is not a concurrent engine")

    async def chat_async(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        """``chat`` of a ``concurrent`` engine, awaited per request."""
        raise NotImplementedError(f"{type(self).__name__} is not a concurrent engine")

    async def logprobs_async(self, token_ids: list[list[int]]) -> list[list[float]]:
        """``logprobs`` of a ``concurrent`` engine, awaited per request."""
        raise NotImplementedError(f"{type(self).__name__} is not a concurrent engine")

    @abstractmethod
    def update_weights(
        self, state_dict: dict[str, torch.Tensor] | None = None, checkpoint_path: str | None = None, version: int = 0
    ) -> None:
        """Load new weights from a state dict or a checkpoint directory; set ``model_version``."""

    def restart(self) -> None:
        """A ``restartable`` engine starts its process again, with its initial weights (the
        explorer then loads the newest) and clears ``crashed``."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart")

    def shutdown(self) -> None:  # noqa: B027 (optional hook, a no-op unless an engine holds resources)
        """Release the engine's resources."""


class CheckpointRefused(ValueError):
    """A checkpoint file holds objects other than tensors and plain values: loading it would run
    the code of whoever wrote it (``torch.load`` unpickles), so it is not loaded."""


def load_plain_state(path: str | Path, map_location: Any = "cpu", allowed: Sequence[Any] = ()) -> Any:
    """A ``torch.save``d file of tensors and plain values (a state dict, optimizer, scheduler,
    RNG state), unpickled with ``weights_only``: torch's allowlist (tensors, DTensors once
    ``torch.distributed.tensor`` is imported, containers, numbers, strings) plus ``allowed``
    (``torch.serialization.safe_globals`` entries, for this load alone). A file that holds
    anything else runs nobody's code: it is refused (``CheckpointRefused``, naming it and the
    first global refused). A checkpoint folder may be shared with other jobs."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(list(allowed)) if allowed else contextlib.nullcontext():
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointRefused(
            f"{path} holds objects other than tensors and plain values, which trinity does not unpickle "
            "(it would run their code); trinity's own checkpoints never do: was the file replaced? "
            f"({_weights_only_refusal(exc)})"
        ) from None


def _weights_only_refusal(exc: BaseException) -> str:
    """What torch's weights-only unpickler refused (``Unsupported global: GLOBAL builtins.eval``),
    without its advice to load the file unsafely."""
    _, found, detail = str(exc).partition("WeightsUnpickler error:")
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    return lines[0].split(" was not an allowed global")[0] if found and lines else first_line(exc)


class ExportError(ValueError):
    """A checkpoint that cannot become a Hugging Face folder (what is missing is named)."""


class TrainingEngine(ABC):
    """Runs the updates of the actor (and critic) with the configured algorithm functions."""

    reference: Any = None
    """The engine's reference model, or None when the algorithm needs none."""
    critic: Any = None
    """The engine's critic, or None when the algorithm has none."""
    global_step: int = 0
    """Optimisation steps taken (restored with a checkpoint)."""
    takes_images: ClassVar[bool] = False
    """Whether the engine passes experiences' image tensors (``Batch.multi_modal_inputs``) to the model."""
    offloads_gradients: ClassVar[bool] = False
    """Whether the engine keeps accumulated gradients on the CPU between micro-batches (``trainer.grad_offload``)."""
    replays_routing: ClassVar[bool] = False
    """Whether the engine's actor forwards route as the experiences' ``routed_experts`` say
    (``algorithm.enable_router_replay``, ``trinity.model.moe_routing``)."""
    takes_lora: ClassVar[bool] = False
    """Whether the engine trains the LoRA adapter of ``model.lora_configs`` (only the adapter's
    tensors then go to ``weights_for_sync``)."""
    in_trainer_process: ClassVar[bool] = True
    """Whether the engine computes in the trainer's own process; False for one whose ranks are
    Ray actors (verl), which a single-process run (``cluster.single_process``) cannot start."""

    @classmethod
    def process_gpus(cls, config: Config) -> int:
        """GPUs the engine computes on in the trainer's own process, whose Ray actor asks for
        them (``trinity.placement``): one when the trainer has any (the reference engine trains
        on one device). An engine whose ranks are Ray actors asking for their own returns 0."""
        return min(config.cluster.trainer_gpu_num, 1)

    @classmethod
    def export_hf(cls, checkpoint: Path, out: Path) -> None:
        """Write the actor of ``checkpoint`` (a ``global_step_N`` folder this engine saved) as a
        Hugging Face model folder ``out`` (``trinity convert``). The default copies the actor's HF
        weights, which the torch engine always saves; an engine with a sharded format of its own
        overrides it to merge the shards where the checkpoint holds no HF weights."""
        source = checkpoint / "actor" / "huggingface"
        if not any(source.glob("*.safetensors")):
            raise ExportError(
                f"{source} holds no Hugging Face weights; a checkpoint in an engine's own sharded format is "
                "converted by that engine: name it with --engine (the run's trainer.trainer_type)"
            )
        shutil.copytree(source, out, dirs_exist_ok=True)

    @classmethod
    def native_config(cls, config: Config) -> dict[str, Any] | None:
        """The engine's own configuration that ``config`` becomes, for ``trinity config ENGINE
        FILE`` to print; None for an engine that has none (the torch engine)."""
        return None

    def prepare_batch(self, batch: Batch, entropy_scores: bool = False) -> Batch:
        """Fill what the advantage function and the losses need and the batch lacks:
        ``old_logprobs`` (current actor), ``ref_logprobs`` (reference), ``values`` (critic), and
        with ``entropy_scores`` the actor's ``entropy_scores`` / ``expected_entropy_scores``.
        The trainer calls it before the KL penalty and the advantage function."""
        changes: dict[str, torch.Tensor] = {}
        if entropy_scores and batch.entropy_scores is None:
            changes["entropy_scores"], changes["expected_entropy_scores"] = self.compute_entropy_scores(batch)
        if batch.old_logprobs is None:
            changes["old_logprobs"] = self.compute_logprobs(batch)
        if self.reference is not None and batch.ref_logprobs is None:
            changes["ref_logprobs"] = self.compute_ref_logprobs(batch)
        if self.critic is not None and batch.values is None:
            changes["values"] = self.compute_values(batch)
        return batch.with_fields(**changes) if changes else batch

    def trains_actor(self, critic_warmup: int) -> bool:
        """Whether this step (``global_step + 1``) updates the actor: verl's critic warm-up
        (``trainer.critic_warmup``) trains the critic alone while the step number is below it;
        without a critic the actor trains at every step."""
        return self.critic is None or self.global_step + 1 >= critic_warmup

    @abstractmethod
    def train_step(self, batch: Batch) -> Metrics:
        """One optimisation step on ``batch``; returns ``actor/*``, ``critic/*`` metrics. Fields
        the batch lacks and the engine can compute (old/ref logprobs, values) are filled first."""

    @abstractmethod
    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        """Current actor logprobs ``[B, R]`` of the batch's responses."""

    @abstractmethod
    def compute_ref_logprobs(self, batch: Batch) -> torch.Tensor:
        """Reference-model logprobs ``[B, R]`` (KL penalty before advantages; KL loss; DPO)."""

    def compute_entropy_scores(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's ``(S, N)`` per response token ``[B, R]`` each: the sampled token's entropy
        score ``p (H + log p)`` and its expectation over the vocabulary (advantages ``clipb``,
        ``clipv``; see ``trinity.model.torch_model.entropy_scores``)."""
        raise NotImplementedError(f"the {type(self).__name__} computes no entropy scores (advantage_fn clipb/clipv)")

    @abstractmethod
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Critic values ``[B, R]`` (GAE advantages need them before ``train_step``)."""

    @abstractmethod
    def save_checkpoint(self, directory: str, step: int, hf_weights: bool = True) -> None:
        """Weights, optimizer and scheduler state under ``directory``; the actor's weights in HF
        format in ``<directory>/actor/huggingface`` at least when ``hf_weights`` (the trainer's
        reading of ``trainer.save_hf_checkpoint``; an engine whose only format is HF ignores it)."""

    @abstractmethod
    def load_checkpoint(self, directory: str) -> int:
        """Restore from ``directory``; returns the step it was saved at."""

    @abstractmethod
    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The actor's weights as a CPU state dict, for memory/NCCL sync: a copy that training
        leaves alone (nccl sync keeps it until the explorer asks for it)."""

"""The reference rollout engine: batched sampling with ``transformers`` on a CPU or one GPU.

Semantics follow vLLM's where a workflow can tell: ``n`` samples per prompt in one left-padded
``generate``; a response ends at EOS (kept in the tokens), at the first stop string (tokens
through the one completing it, text before it) or at the token limit (``length``), never
before ``min_tokens``; ``response_logprobs`` are the raw model's (temperature 1, before any
logits processor), as the trainer recomputes them. Sampling settings come from the config and
``SamplingArgs`` only, from the engine's own RNG stream. With partial rollout, a weight update
pauses the sampling between decode steps; the unfinished rows resume with the new weights
(``_sample``). docs/engines.md gives the rest (prompt truncation, images, LoRA).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig, StoppingCriteria, StoppingCriteriaList, StopStringCriteria

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import Completion, RolloutEngine, SamplingArgs
from trinity.model.lora import is_adapter_model, with_adapter
from trinity.model.moe_routing import RoutingRecorder, require_moe
from trinity.model.multimodal import MediaError, MediaInputs, VisionInputs, collate_media, media_parts, model_media
from trinity.model.token_budgets import first as _first
from trinity.model.token_budgets import response_budget
from trinity.model.tokenization import load_tokenizer
from trinity.model.torch_model import (
    default_device,
    load_model,
    load_weights_into,
    model_dtype,
    read_hf_weights,
    token_logprobs,
)

_LOGIT_BUDGET = 2**27
"""Most logits (rows x tokens x vocab) one log-prob forward pass may hold; bounds memory."""
SAMPLING_EPS = 1e-5
"""A temperature below this is greedy, as in vLLM: logits divided by less overflow to NaN."""


class _StopStrings(StopStringCriteria):
    """transformers' stop-string matching over the tokens from the ``min_tokens``-th generated
    one on: as in vLLM, no stop string ends a response before ``min_tokens``."""

    def __init__(self, tokenizer: Any, stops: list[str], prompt_width: int, min_tokens: int) -> None:
        super().__init__(tokenizer, stops)
        self.start = prompt_width + min_tokens - 1

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if input_ids.shape[1] <= self.start:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return super().__call__(input_ids[:, self.start :], scores, **kwargs)


class _RawLogprobs(StoppingCriteria):
    """Records each sampled token's raw-model logprob while ``generate`` runs.

    A forward hook on the model keeps each step's last-position logits (before any logits
    processor); ``generate`` calls this criterion once the sampled tokens are appended, and it
    reads their entries. This costs no forward pass of its own (one would be a third of the
    sampling time) and holds one step's logits, never the whole ``[rows, steps, vocab]``.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.columns: list[torch.Tensor] = []
        self._logits: torch.Tensor | None = None
        # a peft model's generate runs its inner model's forward, not its own: hook that one
        inner = model.get_base_model() if is_adapter_model(model) else model
        self._hook = inner.register_forward_hook(self._keep)

    def _keep(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._logits = output.logits[:, -1].float()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        sampled = self._logits.gather(-1, input_ids[:, -1:]).squeeze(-1)
        self.columns.append(sampled - self._logits.logsumexp(-1))  # on the device: no sync per token
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def remove(self) -> None:
        self._hook.remove()

    def logprobs(self) -> torch.Tensor | None:
        """``[rows, generated tokens]`` (rows that finished early have junk past their end)."""
        return torch.stack(self.columns, dim=1).cpu() if self.columns else None


class WeightGate:
    """Weights change between forward passes only: a pass holds ``computing``; ``swap`` waits for
    the one in progress, and while it waits ``waiting`` is set, on which partial rollout's
    sampling pauses (``_Paused``) and waits (``wait_open``) before its next pass."""

    def __init__(self) -> None:
        self.computing = threading.Lock()
        self._changed = threading.Condition()
        self.waiting = False

    @contextmanager
    def swap(self) -> Iterator[None]:
        with self._changed:
            self.waiting = True
        try:
            with self.computing:
                yield
        finally:
            with self._changed:
                self.waiting = False
                self._changed.notify_all()

    def wait_open(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: not self.waiting)


class _Paused(StoppingCriteria):
    """Ends ``generate`` after the current decode step while a weight update waits (partial rollout)."""

    def __init__(self, gate: WeightGate) -> None:
        self.gate = gate

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.gate.waiting, dtype=torch.bool, device=input_ids.device)


class TransformersRolloutEngine(RolloutEngine):
    """``AutoModelForCausalLM`` (``AutoModelForImageTextToText`` for a VLM) and its tokenizer
    (``load_tokenizer``) from a local directory (or a hub id)."""

    takes_lora = True
    takes_partial_rollout = True
    records_routing = True

    def __init__(self, config: InferenceModelConfig, model: ModelConfig) -> None:
        self.config, self.model_config = config, model
        self.device = default_device()
        path = config.model_path or model.model_path
        rope = (_first(config.rope_scaling, model.rope_scaling), _first(config.rope_theta, model.rope_theta))
        self.model = load_model(path, model_dtype(self.device, config.dtype), config.trust_remote_code, rope)
        self.model.to(self.device).eval()
        if config.enable_return_routed_experts:
            require_moe(self.model, path)
        self.vision: VisionInputs | None = None
        if getattr(self.model.config, "vision_config", None) is not None:
            self.vision = VisionInputs(path, self.model.config, config.trust_remote_code)
        elif config.enable_multimodal:
            raise MediaError(
                f"enable_multimodal: the model at {path} has no vision tower (its config no vision_config)"
            )
        self.model_version = 0
        eos = self.model.generation_config.eos_token_id
        self.chat_tokenizer = load_tokenizer(model, config, eos if isinstance(eos, list) else [eos])
        self.tokenizer = self.chat_tokenizer.tokenizer
        self.eos_ids = sorted(self.chat_tokenizer.end_of_turn_ids)  # the checkpoint's and the tokenizer's
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        # Sampling comes from the config and SamplingArgs only: generate() would otherwise fill
        # every unset field from the checkpoint's generation_config.json (e.g. Qwen's top_k=20).
        self.model.generation_config = GenerationConfig()
        self.lora = (model.lora_configs or [None])[0] if config.enable_lora else None
        if self.lora is not None:
            self.model = with_adapter(self.model, self.lora, trainable=False).eval()
        self.max_model_len = _first(config.max_model_len, model.max_model_len)
        self.max_response_tokens = _first(config.max_response_tokens, model.max_response_tokens)
        # 0 and 1 mean the same here: a response has a token (EOS at the least) before a stop applies
        self.min_response_tokens = max(1, _first(config.min_response_tokens, model.min_response_tokens, 1))
        self._rng = _RngStream(self.device, config.seed)
        self.gate = WeightGate()

    # -- public API ---------------------------------------------------------------------

    def generate(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        return self.generate_from_ids(self.chat_tokenizer.text_ids(prompts), args)

    def chat(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        prompts = [self._chat_prompt(c, args.tools) for c in conversations]
        return self.generate_from_ids([ids for ids, _ in prompts], args, [media for _, media in prompts])

    def generate_from_ids(
        self, prompts: list[list[int]], args: SamplingArgs, media: list[MediaInputs | None] | None = None
    ) -> list[list[Completion]]:
        """``args.n`` completions for each prompt given as token ids (the path ``generate``
        and ``chat`` take after tokenising), with each prompt's image tensors (``media``)."""
        media = media or [None] * len(prompts)
        prepared = [self.chat_tokenizer.fit(ids) for ids in prompts]
        for (_, truncated_from), inputs in zip(prepared, media, strict=True):
            if truncated_from is not None and inputs:
                raise MediaError(
                    f"a prompt with images of {truncated_from} tokens exceeds max_prompt_tokens "
                    f"{self.chat_tokenizer.max_prompt_tokens}: it cannot be cut (its image tokens would lose their pixels)"
                )
        results: list[list[Completion]] = [[] for _ in prompts]
        live = [i for i, (_, truncated_from) in enumerate(prepared) if truncated_from is None]
        for i, (ids, truncated_from) in enumerate(prepared):
            if truncated_from is not None:
                results[i] = [self._empty(ids, truncated_from) for _ in range(args.n)]
        if live:
            completions = self._sample([prepared[i][0] for i in live], args, [media[i] for i in live])
            for k, i in enumerate(live):
                results[i] = completions[k * args.n : (k + 1) * args.n]
        return results

    @torch.no_grad()
    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        if not token_ids:
            return []
        width = max(len(ids) for ids in token_ids)
        input_ids = torch.full((len(token_ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        with self.gate.computing:
            values = self._logprobs(input_ids, mask, width - 1) if width > 1 else input_ids[:, :0].float()
        return [[0.0] + values[row, : len(ids) - 1].tolist() for row, ids in enumerate(token_ids)]

    def update_weights(
        self,
        state_dict: dict[str, torch.Tensor] | None = None,
        checkpoint_path: str | None = None,
        version: int = 0,
    ) -> None:
        """Copy new weights in place, from a (possibly partial) state dict or from the
        ``*.safetensors`` of a HF directory / training checkpoint; then set ``model_version``.
        With LoRA, the adapter's tensors (a LoRA checkpoint's ``adapter_model.safetensors``).
        Called beside a sampling call (``partial_rollout``), it pauses that call after its
        current decode step and loads while it waits."""
        if (state_dict is None) == (checkpoint_path is None):
            raise ValueError("update_weights needs exactly one of state_dict or checkpoint_path")
        weights = state_dict if state_dict is not None else read_hf_weights(checkpoint_path)
        with self.gate.swap():
            load_weights_into(self.model, weights)
            self.model_version = version

    def shutdown(self) -> None:
        del self.model
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- internals ----------------------------------------------------------------------

    def _chat_prompt(self, messages: list[dict[str, Any]], tools: Any) -> tuple[list[int], MediaInputs | None]:
        """A conversation's prompt ids and, where it holds images, their tensors (the ids expanded to them)."""
        parts = media_parts(messages)
        if not parts:
            return self.chat_tokenizer.prompt_ids(messages, tools), None
        if self.vision is None:
            raise MediaError(
                f"a prompt holds {len(parts)} image/video parts, but the rollout model "
                f"{self.config.model_path or self.model_config.model_path} takes no images (no vision tower)"
            )
        return self.vision.prepare(self.chat_tokenizer.prompt_ids(messages, tools), parts)

    def _empty(self, prompt: list[int], truncated_from: int) -> Completion:
        versions = [] if self.partial_rollout else None
        return Completion(prompt, [], [], "", "length", truncated_from, self.model_version, token_versions=versions)

    @property
    def stop_ids(self) -> list[int]:
        """The tokens that end a response: the EOS ids, none with ``ignore_eos`` (length tests)."""
        return [] if self.config.ignore_eos else self.eos_ids

    def _generation_config(self, args: SamplingArgs, prompt_width: int) -> GenerationConfig:
        temperature = _first(args.temperature, self.model_config.temperature)
        max_new = response_budget(args.max_tokens, self.max_response_tokens, self.max_model_len, prompt_width)
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature >= SAMPLING_EPS:
            top_k = _first(args.top_k, self.model_config.top_k)
            sampling = {
                "do_sample": True,
                "temperature": temperature,
                "top_p": _first(args.top_p, self.model_config.top_p),
                "top_k": max(top_k, 0),  # 0 disables; None would mean transformers' default of 50
            }
        return GenerationConfig(
            max_new_tokens=max_new,
            min_new_tokens=min(_first(args.min_tokens, self.min_response_tokens), max_new),
            eos_token_id=self.stop_ids or None,
            pad_token_id=self.pad_id,
            repetition_penalty=self.model_config.repetition_penalty,
            suppress_tokens=self.vision.special_ids if self.vision else None,
            **sampling,
        )

    @torch.no_grad()
    def _sample(
        self, prompts: list[list[int]], args: SamplingArgs, media: list[MediaInputs | None]
    ) -> list[Completion]:
        """``args.n`` completions per prompt; with partial rollout, the rows an update paused resume under the
        new weights, prompt and tokens so far prefilled again; images do not pause (docs/explorer.md)."""
        rows = [ids for ids in prompts for _ in range(args.n)]
        row_media = [inputs for inputs in media for _ in range(args.n)]
        media_inputs = {k: v.to(self.device) for k, v in collate_media(row_media).items()}
        gen_config = self._generation_config(args, max(len(ids) for ids in rows))
        pausable = self.partial_rollout and not media_inputs
        sampled = [_Sampled() for _ in rows]
        pending, ending = list(range(len(rows))), (self.tokenizer, self.stop_ids, args.stop)
        with self._rng(args.seed):
            while pending:
                done = len(sampled[pending[0]].tokens)  # the rows still sampling have advanced together
                segment = [rows[r] + sampled[r].tokens for r in pending]
                config = _remaining(gen_config, done)
                generated, logprobs, version, routed = self._segment(
                    segment, args, config, media_inputs, pausable, not done
                )
                for k, r in enumerate(pending):
                    sampled[r].add(generated[k], None if logprobs is None else logprobs[k], version, routed, k)
                pending = [r for r in pending if pausable and not _ended(sampled[r].tokens, *ending, gen_config)]
        cuts = [_cut(row.tokens, *ending, gen_config.min_new_tokens) for row in sampled]
        return [
            row.completion(ids, cut, inputs, self.partial_rollout)
            for row, ids, cut, inputs in zip(sampled, rows, cuts, row_media, strict=True)
        ]

    def _segment(
        self,
        rows: list[list[int]],
        args: SamplingArgs,
        gen_config: GenerationConfig,
        media: dict,
        pausable: bool,
        first: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, int, list[torch.Tensor] | None]:
        """One ``generate`` over ``rows`` (prompts, then with their tokens so far) until all end or an update
        pauses it: tokens, raw logprobs or None, the weights' version, each row's routing or None."""
        width = max(len(ids) for ids in rows)
        share = args.n if args.n > 1 and not media and first and width > 1 else 1  # as shared_prompt_cache runs
        input_ids, prompt_mask = (t.to(self.device) for t in _left_padded(rows, width, self.pad_id))
        inputs = model_media(self.model, input_ids, media) if media else {}
        recorder = _RawLogprobs(self.model) if args.logprobs else None
        stopping = StoppingCriteriaList([recorder] if recorder else [])
        if args.stop:
            stopping.append(_StopStrings(self.tokenizer, args.stop, width, max(gen_config.min_new_tokens, 1)))
        if pausable:
            stopping.append(_Paused(self.gate))
            self.gate.wait_open()
        routes = RoutingRecorder(self.model) if self.config.enable_return_routed_experts else None
        try:
            with self.gate.computing:
                if share > 1:
                    inputs = shared_prompt_cache(self.model, input_ids, prompt_mask, args.n)
                output = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=prompt_mask,
                    generation_config=gen_config,
                    stopping_criteria=stopping,
                    **inputs,
                ).cpu()
                version = self.model_version
        finally:
            if recorder:
                recorder.remove()
            if routes:
                routes.remove()
        generated = output[:, width:]
        lengths = [generated.shape[1]] * len(rows)
        routed = routes.sequences([len(ids) for ids in rows], width, lengths, share) if routes else None
        return generated, recorder.logprobs() if recorder else None, version, routed

    def _logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int) -> torch.Tensor:
        """Raw-model logprobs of the last ``width`` tokens, in row chunks bounded by ``_LOGIT_BUDGET``."""
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        step = max(1, _LOGIT_BUDGET // (width * self.model.config.vocab_size))
        chunks = [
            token_logprobs(
                self.model,
                input_ids[i : i + step].to(self.device),
                attention_mask[i : i + step].to(self.device),
                position_ids[i : i + step].to(self.device),
                width,
            )[0].cpu()
            for i in range(0, input_ids.shape[0], step)
        ]
        return torch.cat(chunks)


def shared_prompt_cache(model: Any, input_ids: torch.Tensor, mask: torch.Tensor, n: int) -> dict[str, Any]:
    """``generate``'s cache of each prompt but its last token, computed once for the prompt and
    repeated for its ``n`` rows (which follow each other), so that ``generate`` reads only the last
    prompt token of each row: a quickstart step's sampling took 24 ms instead of 51 ms. Hidden
    states only (no logits over the vocabulary); the decoder carries a LoRA adapter's layers."""
    if input_ids.shape[1] < 2:
        return {}
    inner = model.get_base_model() if is_adapter_model(model) else model
    decoder = inner.get_decoder()
    name = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"  # < 5.24
    cache = DynamicCache()  # full layers for any model: a sliding window is applied by the mask
    prompts, prompt_mask = input_ids[::n, :-1], mask[::n, :-1]
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
    decoder(input_ids=prompts, attention_mask=prompt_mask, position_ids=positions, use_cache=True, **{name: cache})
    cache.batch_repeat_interleave(n)
    return {name: cache}


class _Sampled:
    """A row's response so far: tokens, their raw logprobs and the weights' version of each."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.routed: torch.Tensor | None = None

    def add(
        self, tokens: torch.Tensor, logprobs: torch.Tensor | None, version: int, routed: list | None, row: int
    ) -> None:
        """A segment's tokens; its routing (``row`` of ``routed``) covers all positions so far: it replaces."""
        self.routed = routed[row] if routed is not None else None
        self.tokens += tokens.tolist()
        self.logprobs += logprobs.tolist() if logprobs is not None else []
        self.versions += [version] * tokens.numel()

    def completion(
        self, prompt: list[int], cut: tuple[int, str, str], media: MediaInputs | None, versions: bool
    ) -> Completion:
        """The response up to its ``cut`` (``_cut``); with ``versions``, each token's."""
        length, text, reason = cut
        marks = self.versions[:length] if versions else None
        routed = self.routed[: len(prompt) + length - 1].clone() if self.routed is not None else None
        return Completion(
            prompt,
            self.tokens[:length],
            self.logprobs[:length],
            text,
            reason,
            None,
            self.versions[0],
            media,
            token_versions=marks,
            routed_experts=routed,
        )


def _left_padded(rows: list[list[int]], width: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` of token ids left-padded to ``width``, and their attention mask."""
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(rows):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    return input_ids, mask


def _remaining(gen_config: GenerationConfig, done: int) -> GenerationConfig:
    """``gen_config``'s budgets less the ``done`` tokens a resumed row has (itself for none)."""
    if not done:
        return gen_config
    config = GenerationConfig.from_dict(gen_config.to_dict())
    config.max_new_tokens -= done
    config.min_new_tokens = max(config.min_new_tokens - done, 0)
    return config


def _ended(tokens: list[int], tokenizer: Any, stop_ids: list[int], stops: list[str], config: GenerationConfig) -> bool:
    """Whether a row's ``tokens`` so far end its response (EOS, a stop string, the budget)."""
    ending = _cut(tokens, tokenizer, stop_ids, stops, config.min_new_tokens)[2]
    return ending == "stop" or len(tokens) >= config.max_new_tokens


def _cut(
    tokens: list[int], tokenizer: Any, stop_ids: list[int], stops: list[str], min_tokens: int
) -> tuple[int, str, str]:
    """Where a generated row ends: ``(token count, text, finish_reason)``."""
    eos_at = next((i for i, t in enumerate(tokens) if i >= min_tokens - 1 and t in stop_ids), None)
    body = tokens if eos_at is None else tokens[:eos_at]
    if stops:
        text = tokenizer.decode(body, skip_special_tokens=True)
        floor = len(tokenizer.decode(body[: max(min_tokens - 1, 0)], skip_special_tokens=True))
        hits = [(at, stop) for stop in stops if (at := text.find(stop, max(floor - len(stop) + 1, 0))) >= 0]
        if hits:
            at, stop = min(hits)
            end = at + len(stop)
            length = _tokens_covering(tokenizer, body, end)
            return length, text[:at], "stop"
    if eos_at is not None:
        return eos_at + 1, tokenizer.decode(body, skip_special_tokens=True), "stop"
    return len(tokens), tokenizer.decode(tokens, skip_special_tokens=True), "length"


def _tokens_covering(tokenizer: Any, tokens: list[int], chars: int) -> int:
    """Fewest leading ``tokens`` whose text is at least ``chars`` characters (binary search)."""
    low, high = 1, len(tokens)
    while low < high:
        mid = (low + high) // 2
        if len(tokenizer.decode(tokens[:mid], skip_special_tokens=True)) >= chars:
            high = mid
        else:
            low = mid + 1
    return low


class _RngStream:
    """The engine's own RNG stream (seeded once), so the process's global RNG is left as it was."""

    def __init__(self, device: torch.device, seed: int | None) -> None:
        self.device = device
        self.devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=self.devices, device_type=device.type):
            if seed is not None:
                torch.manual_seed(seed)
            self.state = self._get()

    def _get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if self.devices else None

    @contextmanager
    def __call__(self, seed: int | None) -> Iterator[None]:
        """Sample from the stream, or from ``seed`` for one call; the global RNG state is restored
        afterwards either way."""
        with torch.random.fork_rng(devices=self.devices, device_type=self.device.type):
            if seed is not None:
                torch.manual_seed(seed)
                yield
                return
            cpu_state, cuda_state = self.state
            torch.set_rng_state(cpu_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state, self.device)
            yield
            self.state = self._get()

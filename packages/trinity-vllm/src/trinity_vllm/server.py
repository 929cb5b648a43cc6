"""The Ray actor that owns one vLLM engine (``AsyncLLM``): sampling, logprobs, new weights.

An async actor: requests of every caller (the explorer's runners, the OpenAI endpoint) share vLLM's
continuous batching. Prompts arrive as token ids, templated and fitted by the explorer-side
``VLLMRolloutEngine``; semantics follow the reference engine (``trinity.rollout.transformers_rollout``):
the raw model's ``response_logprobs`` (``logprobs_mode=raw_logprobs``), sampling settings from
``SamplingArgs`` only (``generation_config="vllm"``), a response ending at EOS (kept in the tokens),
a stop string, or ``max_tokens`` bounded by ``max_model_len`` minus the prompt (the package README).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import torch

from trinity.plugin_api import (
    Completion,
    EngineStartError,
    InferenceModelConfig,
    ModelConfig,
    SamplingArgs,
    door_server,
    endpoint_port,
    first,
    fresh_adapter_state,
    guarded,
    is_adapter_folder,
    response_budget,
    rope_override,
    synced_adapter_tensors,
    write_adapter_folder,
)
from trinity_vllm.plugin import adapter_name

WORKER_EXTENSION = "trinity_vllm.worker.WeightLoader"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The adapter ranks vLLM sizes its LoRA slots for (``max_lora_rank``); an adapter of a rank
between two fits the larger slot."""


class RetiredAdapters:
    """Folders of replaced adapter versions, each deleted once no request that may carry it runs.

    A request carries the adapter that was current when it started until it ends, and vLLM
    loads that adapter again from its folder when a newer version took its slot: a folder
    deleted at the swap kills vLLM's engine and every request in it. Each request holds a
    ticket, the number of swaps before it started; the folder replaced by swap ``r`` goes
    once no request holding a ticket below ``r`` runs.
    """

    def __init__(self) -> None:
        self.swaps = 0
        self.running: Counter[int] = Counter()
        self.retired: list[tuple[int, Path]] = []

    def begin(self) -> int:
        """A request starts with the current adapter: its ticket, for ``end``."""
        self.running[self.swaps] += 1
        return self.swaps

    def end(self, ticket: int) -> None:
        self.running[ticket] -= 1
        if not self.running[ticket]:
            del self.running[ticket]
        self._sweep()

    def retire(self, folder: Path) -> None:
        """The current adapter, kept in ``folder``, was just replaced."""
        self.swaps += 1
        self.retired.append((self.swaps, folder))
        self._sweep()

    def _sweep(self) -> None:
        oldest = min(self.running, default=self.swaps)
        for swap, folder in [item for item in self.retired if item[0] <= oldest]:
            shutil.rmtree(folder, ignore_errors=True)
            self.retired.remove((swap, folder))


class LoadGate:
    """Weight loads against the requests in flight, so that every token's version is known.

    A load either waits for the requests in flight to end (the default: each response is one
    version's) or aborts the interruptible ones (partial rollout: their callers go on from the
    tokens so far under the new weights). Requests that arrive during a load wait for it. vLLM
    itself would apply a load between two decode steps of the requests running, unrecorded.
    """

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._running: dict[str, bool] = {}  # request id: interruptible
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def request(self, request_id: str, interruptible: bool) -> AsyncIterator[None]:
        """A request runs inside: after any load in progress, and before any that starts meanwhile."""
        await self._open.wait()
        self._running[request_id] = interruptible
        self._idle.clear()
        try:
            yield
        finally:
            del self._running[request_id]
            if not self._running:
                self._idle.set()

    @asynccontextmanager
    async def load(self, abort: Callable[[list[str]], Awaitable[None]] | None) -> AsyncIterator[None]:
        """New weights load inside, once no request runs: with ``abort``, the interruptible ones are
        aborted first (one not yet known to vLLM then runs to its end)."""
        async with self._lock:
            self._open.clear()
            try:
                if abort is not None and (interruptible := [rid for rid, cut in self._running.items() if cut]):
                    await abort(interruptible)
                await self._idle.wait()
                yield
            finally:
                self._open.set()


class VLLMServer:
    """One ``AsyncLLM`` with ``ranks_per_engine()`` workers (tensor x data x pipeline parallel), started by ``start()``."""

    def __init__(self, config: InferenceModelConfig, model: ModelConfig, name: str) -> None:
        self.config, self.model_config, self.name = config, model, name
        self.path = config.model_path or model.model_path
        self.max_model_len = first(config.max_model_len, model.max_model_len)
        self.max_response_tokens = first(config.max_response_tokens, model.max_response_tokens)
        self.min_response_tokens = first(config.min_response_tokens, model.min_response_tokens, 1)
        self.version = 0
        # LoRA: vLLM holds the frozen base; each adapter version the trainer sends is written to
        # a folder and becomes the LoRARequest every request carries (a fresh one, B = 0, is the
        # base model: no request until the first update, unless the endpoint serves the adapter
        # by its name, enable_runtime_lora_updating)
        self.lora = (model.lora_configs or [None])[0] if config.enable_lora else None
        self.adapter: Any = None
        self.serves_adapter = self.lora is not None and config.enable_openai_api and config.enable_runtime_lora_updating
        self._served_models: Any = None
        self._adapters = tempfile.TemporaryDirectory(prefix="trinity-vllm-lora-") if self.lora else None
        self._retired = RetiredAdapters()
        self._gate = LoadGate()
        self.engine: Any = None
        self.api_url: str | None = None
        self._api_server: asyncio.Task | None = None

    async def start(self, chat_template: str | None = None, template_kwargs: dict | None = None) -> str | None:
        """Start vLLM (and its OpenAI endpoint with ``enable_openai_api``, applying
        ``chat_template`` over the tokenizer's and ``template_kwargs`` by default: the engine's
        ``ChatTokenizer`` settings); returns the endpoint's base URL, or None."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._check_head_size()
        if self.lora is not None and self.lora.path:
            self.adapter = self._adapter_request(self.lora.path, 0)
        elif self.serves_adapter:  # the endpoint names an adapter from the start: a fresh one until the first sync
            self.adapter = self._adapter_request(self._fresh_adapter(), 0)
        try:
            self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_args()))
        except Exception as exc:
            raise EngineStartError(
                f"{self.name}: vLLM failed to start on model_path {self.path!r}: {type(exc).__name__}: {exc} "
                "(vLLM's own log above names the root cause; common ones: gpu_memory_utilization above the free "
                "GPU memory, max_model_len too long for the KV cache)"
            ) from None
        if self.config.enable_openai_api:
            self.api_url = await self._serve_openai(chat_template, template_kwargs or {})
        return self.api_url

    async def _serve_openai(self, chat_template: str | None, template_kwargs: dict) -> str:
        """vLLM's own OpenAI server over this engine, on ``openai_api_host`` (``endpoint_port``), in
        this actor's event loop: its requests join the explorer's in one scheduler. It sits
        behind trinity's request guard too: vLLM's ``--api-key`` leaves paths outside ``/v1``
        (``/invocations``) open and its CORS answers any page's preflight."""
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.app import build_app
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.entrypoints.launchers.launcher import create_server_socket
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        host = self.config.openai_api_host
        sock = create_server_socket((host, endpoint_port(self.config)), reuse_port=False)
        port = sock.getsockname()[1]
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(self.openai_argv(chat_template, template_kwargs))
        tasks = await self.engine.get_supported_tasks()
        app = build_app(args, tasks, self.engine.model_config)
        await init_app_state(self.engine, app.state, args, tasks)
        if self.serves_adapter:
            await self._serve_adapter(app.state.openai_serving_models)
        if self.serves_adapter:
            app = self._ticketed(app)
        app = guarded(app, host, self.config.endpoint_key())
        # uvicorn directly: vLLM's serve_http installs signal handlers, which only the main
        # thread may (a Ray actor's event loop runs on another).
        server = door_server(app, log_level="warning", access_log=False)
        self._api_server = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # the socket listens from here: no request meets a refused connection
            if self._api_server.done():
                self._api_server.result()  # its failure, if it raised one
                raise EngineStartError(f"{self.name}: vLLM's OpenAI server on {host} stopped while starting")
            await asyncio.sleep(0.01)
        return f"http://{host}:{port}/v1"

    async def _serve_adapter(self, models: Any) -> None:
        """Requests naming the adapter sample through its current version: each sync's
        ``_load_adapter`` swaps it in vLLM's registry of served models (``OpenAIServingModels``),
        with no ``/v1/load_lora_adapter`` route (it would load any folder a request names).
        ``/v1/models`` lists it first: a client that takes the first model gets the policy in training."""
        await self.engine.add_lora(self.adapter)  # a broken adapter fails the start, not a request
        models.lora_requests[self.adapter.lora_name] = self.adapter
        listing = models.show_available_models

        async def adapter_first() -> Any:
            found = await listing()
            found.data.sort(key=lambda card: card.id != self.adapter.lora_name)
            return found

        models.show_available_models = adapter_first
        self._served_models = models

    def _ticketed(self, app: Any) -> Any:
        """The endpoint's requests hold a ticket of ``RetiredAdapters`` while they run: one
        naming the adapter carries the version current when it came in."""

        async def ticketed(scope: dict, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            ticket = self._retired.begin()
            try:
                await app(scope, receive, send)
            finally:
                self._retired.end(ticket)

        return ticketed

    def openai_argv(self, chat_template: str | None, template_kwargs: dict) -> list[str]:
        """vLLM's OpenAI server arguments from the config (parsed in this process: the key
        never shows in a process list)."""
        config = self.config
        argv = ["--model", self.path]
        if chat_template is not None:
            argv += ["--chat-template", chat_template]
        if template_kwargs:
            argv += ["--default-chat-template-kwargs", json.dumps(template_kwargs)]
        if config.enable_auto_tool_choice:
            argv += ["--enable-auto-tool-choice"]
        if config.tool_call_parser:
            argv += ["--tool-call-parser", config.tool_call_parser]
        if config.reasoning_parser:
            argv += ["--reasoning-parser", config.reasoning_parser]
        if key := config.endpoint_key():
            argv += ["--api-key", key]
        return argv

    def engine_args(self) -> dict[str, Any]:
        """vLLM engine arguments from the config; ``extra_engine_args`` override them."""
        from vllm.platforms import current_platform

        config, model = self.config, self.model_config
        rope = rope_override(
            self.path,
            config.trust_remote_code,
            first(config.rope_scaling, model.rope_scaling),
            first(config.rope_theta, model.rope_theta),
        )
        return {
            "model": self.path,
            # float32 on a CPU, as the reference engine: bf16 there is slow and lossy.
            "dtype": "float32" if current_platform.is_cpu() else config.dtype,
            "seed": config.seed,
            "tensor_parallel_size": config.tensor_parallel_size,
            "data_parallel_size": config.data_parallel_size,
            "pipeline_parallel_size": config.pipeline_parallel_size,
            "enable_expert_parallel": config.enable_expert_parallel,
            "distributed_executor_backend": "mp",
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "enforce_eager": config.enforce_eager,
            "enable_prefix_caching": config.enable_prefix_caching,
            "enable_chunked_prefill": config.enable_chunked_prefill,
            "max_model_len": self.max_model_len,
            "logprobs_mode": "raw_logprobs",
            "generation_config": "vllm",
            "worker_extension_cls": WORKER_EXTENSION,
            "disable_log_stats": True,
            "enable_log_requests": config.enable_log_requests,
            "trust_remote_code": config.trust_remote_code,
            **({"hf_overrides": {"rope_parameters": rope}} if rope is not None else {}),
            **self._lora_args(),
            **config.extra_engine_args,
        }

    def _lora_args(self) -> dict[str, Any]:
        """vLLM's LoRA settings for ``model.lora_configs`` (one adapter slot)."""
        if self.lora is None:
            return {}
        model = self.model_config
        args = {
            "enable_lora": True,
            "max_loras": 1,
            "max_lora_rank": next((r for r in LORA_RANKS if r >= self.lora.lora_rank), self.lora.lora_rank),
            "fully_sharded_loras": model.fully_sharded_loras,
            "max_cpu_loras": model.max_cpu_loras,
        }
        if self.lora.lora_dtype != "auto":
            args["lora_dtype"] = self.lora.lora_dtype
        return args

    def _check_head_size(self) -> None:
        """vLLM's CPU attention takes a few head sizes only; its own error names neither."""
        from transformers import AutoConfig
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        if not current_platform.is_cpu():
            return
        hf = AutoConfig.from_pretrained(self.path)
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        supported = CPUAttentionBackend.get_supported_head_sizes()
        if head_dim not in supported:
            raise EngineStartError(
                f"{self.name}: model_path {self.path!r} has head size {head_dim}; vLLM's CPU attention "
                f"supports {supported} only (use engine_type transformers for this model on a CPU)"
            )

    # -- requests -----------------------------------------------------------------------

    async def generate(
        self, prompts: list[tuple[list[int], int | None]], args: SamplingArgs, partial: bool = False
    ) -> list[list[Completion]]:
        """``args.n`` completions per ``(token ids, truncated_from)`` prompt; truncated ones (a
        length in ``truncated_from``) get empty completions that carry it. ``partial`` (partial
        rollout): a weight load cuts the samples short and they go on under the new weights, each
        token's version in ``token_versions``."""
        return list(await asyncio.gather(*(self._sample(ids, cut, args, partial) for ids, cut in prompts)))

    async def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        return list(await asyncio.gather(*(self._prompt_logprobs(ids) for ids in token_ids)))

    async def _sample(
        self, ids: list[int], truncated_from: int | None, args: SamplingArgs, partial: bool
    ) -> list[Completion]:
        if truncated_from is not None:
            versions = [] if partial else None
            return [
                Completion(ids, [], [], "", "length", truncated_from, self.version, token_versions=versions)
                for _ in range(args.n)
            ]
        params = self._params(args, len(ids))
        output, version = await self._run(ids, params, interruptible=partial)
        if not partial:
            return [_completion(ids, _Response(sample, version), None) for sample in output.outputs]
        return list(
            await asyncio.gather(*(self._resume(ids, _Response(sample, version), params) for sample in output.outputs))
        )

    async def _resume(self, ids: list[int], response: _Response, params: Any) -> Completion:
        """A sample a weight load cut short (``finish_reason`` abort) goes on from its tokens so far,
        prefilled again under the new weights, until it ends."""
        while response.finish_reason == "abort":
            if len(response.tokens) >= params.max_tokens:  # cut after its last token
                response.finish_reason = "length"
                break
            rest = params.clone()
            rest.n = 1
            rest.max_tokens = params.max_tokens - len(response.tokens)
            rest.min_tokens = max(params.min_tokens - len(response.tokens), 0)
            if params.seed is not None:  # not the seed of the request's first sample for every one of its n
                rest.seed = hash((params.seed, response.index, len(response.tokens))) % 2**31
            output, version = await self._run(ids + response.tokens, rest, interruptible=True)
            response.extend(output.outputs[0], version)
        return _completion(ids, response, response.versions)

    async def _prompt_logprobs(self, ids: list[int]) -> list[float]:
        from vllm import SamplingParams

        if not ids:
            return []
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        output, _ = await self._run(ids, params, interruptible=False)
        return [0.0] + [step[token].logprob for step, token in zip(output.prompt_logprobs[1:], ids[1:], strict=True)]

    def _params(self, args: SamplingArgs, prompt_length: int) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        model = self.model_config
        max_new = response_budget(args.max_tokens, self.max_response_tokens, self.max_model_len, prompt_length)
        return SamplingParams(
            n=args.n,
            temperature=first(args.temperature, model.temperature),
            top_p=first(args.top_p, model.top_p),
            top_k=max(first(args.top_k, model.top_k), 0),  # 0 and below: off
            repetition_penalty=model.repetition_penalty,
            max_tokens=max_new,
            min_tokens=min(first(args.min_tokens, self.min_response_tokens), max_new),
            stop=list(args.stop) or None,
            seed=args.seed,
            logprobs=0 if args.logprobs else None,
            ignore_eos=self.config.ignore_eos,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    async def _run(self, ids: list[int], params: Any, interruptible: bool) -> tuple[Any, int]:
        """The final output of one request (``FINAL_ONLY`` or a prompt-logprobs request: one output),
        and the version of the weights it ran with; ``interruptible``: a load aborts it (``LoadGate``)."""
        request_id = uuid.uuid4().hex
        async with self._gate.request(request_id, interruptible):
            version, ticket = self.version, self._retired.begin()
            try:
                outputs = [
                    out
                    async for out in self.engine.generate(
                        {"prompt_token_ids": ids}, params, request_id=request_id, lora_request=self.adapter
                    )
                ]
            finally:
                self._retired.end(ticket)
        return outputs[-1], version

    # -- weights ------------------------------------------------------------------------

    async def update_weights(
        self,
        state_dict: dict[str, torch.Tensor] | None,
        checkpoint_path: str | None,
        version: int,
        partial: bool = False,
    ) -> int:
        """Reload the weights in place from a state dict or a directory of ``*.safetensors``;
        ``partial``: cutting the samples in flight short (``generate``)."""
        if (state_dict is None) == (checkpoint_path is None):
            raise ValueError("update_weights needs exactly one of state_dict or checkpoint_path")
        async with self._loading(partial):
            if self.lora is not None:
                await self._load_adapter(state_dict, checkpoint_path, version)
            elif checkpoint_path is not None:
                await self.engine.collective_rpc("load_checkpoint", args=(checkpoint_path,))
            else:
                # vLLM's RPC to its workers cannot carry tensors: they go through a file (in memory
                # where /dev/shm exists). NCCL sync avoids the copy on GPUs.
                from safetensors.torch import save_file

                shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
                with tempfile.TemporaryDirectory(prefix="trinity-vllm-", dir=shm) as folder:
                    tensors = {k: v.contiguous() for k, v in state_dict.items()}
                    save_file(tensors, str(Path(folder) / "model.safetensors"))
                    await self.engine.collective_rpc("load_checkpoint", args=(folder,))
            return await self._loaded(version)

    @asynccontextmanager
    async def _loading(self, partial: bool) -> AsyncIterator[None]:
        """Where a load runs: past the ``LoadGate``, except an adapter's without ``partial`` (each
        request carries the adapter it started with to its end, so nothing needs to wait).
        Without ``partial`` the endpoint's requests in flight end first too (vLLM's pause in
        ``wait`` mode; those arriving meanwhile wait in vLLM's queue), so each of its responses is
        one version's; with it they go on across the load."""
        if self.lora is not None and not partial:
            yield
            return
        async with self._gate.load(self.engine.abort if partial else None):
            if partial:
                yield
                return
            await self.engine.pause_generation(mode="wait", clear_cache=False)
            try:
                yield
            finally:
                await self.engine.resume_generation()

    async def _load_adapter(
        self, state_dict: dict[str, torch.Tensor] | None, checkpoint_path: str | None, version: int
    ) -> None:
        """A new adapter version: written to a folder of its own (a checkpoint's adapter folder is
        read where it is; checkpoint sync's folder of adapter tensors gets its config written),
        loaded by vLLM before requests carry it; the previous one is dropped, its folder kept
        while requests that started with it run (``RetiredAdapters``)."""
        if checkpoint_path is not None:
            folder = Path(checkpoint_path)
            if not is_adapter_folder(folder) and is_adapter_folder(folder / "huggingface"):
                folder = folder / "huggingface"
            if not is_adapter_folder(folder):
                state_dict = synced_adapter_tensors(folder)
                if state_dict is None:
                    raise ValueError(
                        f"{self.name}: {checkpoint_path} holds no LoRA adapter (adapter_config.json, "
                        "or the adapter's tensors alone as checkpoint sync writes them)"
                    )
        if state_dict is not None:
            folder = Path(self._adapters.name) / f"v{version}"
            write_adapter_folder(folder, state_dict, self.lora, self.path)
        previous, self.adapter = self.adapter, self._adapter_request(folder, version)
        await self.engine.add_lora(self.adapter)
        if self._served_models is not None:
            self._served_models.lora_requests[self.adapter.lora_name] = self.adapter
        if previous is not None:
            await self.engine.remove_lora(previous.lora_int_id)  # a running request's reloads from its folder
            if Path(previous.lora_path).parent == Path(self._adapters.name):
                self._retired.retire(Path(previous.lora_path))

    def _adapter_request(self, folder: str | Path, version: int) -> Any:
        from vllm.lora.request import LoRARequest

        # ids are vLLM's cache keys: one per version (0 is not a valid id)
        return LoRARequest(adapter_name(self.lora), version + 1, str(folder))

    def _fresh_adapter(self) -> Path:
        """A fresh adapter's folder (B = 0: the base model's outputs)."""
        folder = Path(self._adapters.name) / "v0"
        state = fresh_adapter_state(self.path, self.lora, self.config.trust_remote_code)
        write_adapter_folder(folder, state, self.lora, self.path)
        return folder

    async def init_weight_group(self, address: dict[str, Any], rank_offset: int) -> None:
        """nccl sync: every worker joins the trainer's weight group (``WeightLoader.init_weight_group``)."""
        await self.engine.collective_rpc("init_weight_group", args=(address, rank_offset))

    async def receive_weights(self, meta: list, version: int, partial: bool = False) -> int:
        """nccl sync: every worker receives the trainer's broadcast and loads it in place."""
        async with self._loading(partial):
            await self.engine.collective_rpc("receive_weights", args=(meta,))
            return await self._loaded(version)

    async def _loaded(self, version: int) -> int:
        """After new weights: drop the prefix cache (its keys were computed with the old
        weights) and take their version."""
        await self.engine.reset_prefix_cache()
        self.version = version
        return version

    def shutdown(self) -> None:
        if self._api_server is not None:
            self._api_server.cancel()
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
        if self._adapters is not None:
            self._adapters.cleanup()


class _Response:
    """One sample's response so far: its tokens, raw logprobs and text, and each token's version."""

    def __init__(self, sample: Any, version: int) -> None:
        self.index = sample.index
        """Which of the request's ``n`` samples."""
        self.version = version
        """The weights' version of the first part (of the first token, when it has one)."""
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.text = ""
        self.finish_reason = ""
        self.extend(sample, version)

    def extend(self, sample: Any, version: int) -> None:
        """The next part of the response, sampled by weights ``version``."""
        tokens = list(sample.token_ids)
        if not self.tokens:
            self.version = version
        self.tokens += tokens
        self.logprobs += [step[token].logprob for step, token in zip(sample.logprobs or [], tokens, strict=False)]
        self.versions += [version] * len(tokens)
        self.text += sample.text
        self.finish_reason = sample.finish_reason


def _completion(prompt: list[int], response: _Response, token_versions: list[int] | None) -> Completion:
    return Completion(
        prompt_token_ids=prompt,
        response_token_ids=response.tokens,
        response_logprobs=response.logprobs,
        text=response.text,
        finish_reason="length" if response.finish_reason == "length" else "stop",
        model_version=response.version,
        token_versions=token_versions,
    )

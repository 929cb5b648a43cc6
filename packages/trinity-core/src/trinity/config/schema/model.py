"""The ``model`` section: the model trained, its LoRA adapter, token limits and chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from trinity.config.base import ConfigModel, derived


class LoRAConfig(ConfigModel):
    """A LoRA adapter of the rollout model, trained alone (peft) while the base stays frozen; only
    the adapter is synced and checkpointed (the torch trainer and transformers engine take it)."""

    name: str | None = Field(None, description="Adapter name (the rollout engine's lora_modules).")
    path: str | None = Field(None, description="A saved peft adapter to start from; unset: a fresh adapter (B = 0).")
    base_model_name: str | None = Field(None, description="Name of the base model the adapter belongs to.")
    lora_rank: int = Field(32, ge=0, description="Rank r of the adapter.")
    lora_alpha: int = Field(32, ge=0, description="Scaling alpha of the adapter (its update is scaled by alpha / r).")
    lora_dtype: Literal["auto", "float16", "bfloat16"] = Field(
        "auto",
        description="Data type of the adapter in vLLM (auto: the model's); the reference engines hold it as the model.",
    )
    target_modules: str | list[str] = Field(
        "all-linear",
        description="Modules the adapter wraps: all-linear (every linear layer but the LM head), names, or a regex.",
    )
    exclude_modules: str | list[str] | None = Field(
        None, description="Modules left without an adapter: names or a regex."
    )
    is_dummy: bool = derived(False, "Whether the adapter starts fresh (no path).")


class TinkerConfig(ConfigModel):
    """Training and sampling on the hosted Tinker service instead of local engines (Trinity-RFT's and its
    forks' keys): refused at ``trinity run``, a warning at ``trinity config check`` (no Tinker backend here)."""

    enable: bool = Field(False, description="Train and sample on the Tinker service (refused here).")
    base_model: str | None = Field(None, description="Tinker's name of the base model; unset: model.model_path.")
    rank: int = Field(16, ge=1, description="LoRA rank on Tinker.")
    seed: int | None = Field(None, description="Seed on Tinker.")
    train_mlp: bool = Field(True, description="Train the MLP layers.")
    train_attn: bool = Field(True, description="Train the attention layers.")
    train_unembed: bool = Field(True, description="Train the unembedding.")
    base_url: str | None = Field(None, description="URL of the Tinker service; unset: the client's default.")
    full_param: bool = Field(False, description="Train every weight instead of a LoRA adapter.")
    server_loss_fn: str | None = Field(
        None, description="A loss the service computes; unset: the loss is the client's."
    )
    server_loss_fn_config: dict[str, Any] | None = Field(None, description="Arguments of server_loss_fn.")
    server_loss_send_mask: bool = Field(False, description="Send the response mask with server_loss_fn's inputs.")
    forward_backward_chunk_bytes: int | None = Field(
        None, ge=1, description="Bytes per forward_backward request; unset: the whole batch in one."
    )
    forward_backward_max_inflight: int = Field(1, ge=1, description="forward_backward chunks in flight at once.")
    sdk_chunk_bytes_cap: int | None = Field(None, ge=1, description="The client's byte limit of one request.")


class ExternalModelConfig(ConfigModel):
    """A model served by an OpenAI-compatible API (bench mode)."""

    enable: bool = Field(False, description="Evaluate the external model instead of a local one (bench mode).")
    base_url_env: str = Field("OPENAI_BASE_URL", description="Environment variable holding the API's base URL.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    model_name: str | None = Field(None, description="Model name sent to the API.")


class ModelConfig(ConfigModel):
    """The model trained, and the defaults of its rollouts."""

    model_path: str = Field("", description="Path or hub id of the model to train.")
    trust_remote_code: bool = Field(False, description="Allow the model's own code when loading it.")
    critic_model_path: str = Field("", description="Path of the critic (PPO); unset: model_path.")
    custom_chat_template: str | None = Field(None, description="Jinja chat template replacing the tokenizer's.")
    chat_template_path: str | None = Field(
        None, description="File of a chat template, read when custom_chat_template is unset."
    )
    temperature: float = Field(1.0, ge=0.0, description="Rollout temperature; 0 is greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Rollout nucleus mass.")
    top_k: int = Field(-1, ge=-1, description="Rollout top-k; -1 disables it.")
    logprobs: int = Field(0, ge=0, description="Top log-probabilities returned per token.")
    max_model_len: int | None = Field(None, ge=1, description="Prompt + response token limit.")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Prompt token limit.")
    max_response_tokens: int | None = Field(None, ge=1, description="Response token limit.")
    min_response_tokens: int = Field(0, ge=0, description="Tokens generated before end-of-sequence is allowed.")
    enable_prompt_truncation: bool = Field(True, description="Cut prompts to max_prompt_tokens (left side).")
    repetition_penalty: float = Field(1.0, gt=0.0, description="Penalty of repeated tokens; 1 is none.")
    enable_thinking: bool | None = Field(
        None, description="Chat template's enable_thinking (Qwen3); unset: the template's default."
    )
    lora_configs: list[LoRAConfig] | None = Field(
        None, description="LoRA adapter trained instead of the full model (one, as in Trinity-RFT)."
    )
    fully_sharded_loras: bool = Field(
        False, description="vLLM: shard the adapter across tensor-parallel ranks (vLLM's fully_sharded_loras)."
    )
    max_cpu_loras: int | None = Field(
        None, ge=1, description="vLLM: adapters kept in CPU memory (vLLM's max_cpu_loras; unset: max_loras)."
    )
    rope_scaling: dict[str, Any] | None = Field(
        None, description="RoPE scaling over the checkpoint's (rope_type, factor, ...); the verl trainer refuses it."
    )
    rope_theta: float | None = Field(
        None, gt=0, description="RoPE base over the checkpoint's; the verl trainer refuses it."
    )
    tinker: TinkerConfig = Field(default_factory=TinkerConfig, description="Tinker service settings.")
    external_model: ExternalModelConfig = Field(
        default_factory=ExternalModelConfig, description="An API model to evaluate (bench mode)."
    )

    def chat_template_settings(
        self, chat_template: str | None = None, enable_thinking: bool | None = None
    ) -> tuple[str | None, bool | None]:
        """The template and ``enable_thinking`` of this model, a model section or a dataset format.

        The template: its own, else ``custom_chat_template``, else the file at ``chat_template_path``
        (OSError if unreadable), else None (the tokenizer's). ``enable_thinking``: its own, else the
        model's (None: the template's own default). Derivation and tokenizers both apply it.
        """
        template = chat_template or self.custom_chat_template
        if template is None and self.chat_template_path is not None:
            template = Path(self.chat_template_path).read_text()
        return template, self.enable_thinking if enable_thinking is None else enable_thinking

"""Model helpers the reference engines share: loading, token log-probs, weight files.

Log-probs here are always those of the raw model distribution (temperature 1, no top-p /
top-k), so the rollout engine's response logprobs and the training engine's recompute
measure the same thing and their ratio is 1 for unchanged weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from trinity.model.lora import is_adapter_model, load_adapter_state
from trinity.model.multimodal import MediaInputs, model_media

HF_SUBDIR = "huggingface"
ACTOR_HF_SUBDIR = Path("actor") / HF_SUBDIR
"""Where a training checkpoint keeps the actor's weights in HF format."""


def default_device() -> torch.device:
    """The current CUDA device (one of those Ray gave the role; the explorer selects each of its
    engines' in turn), else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def model_dtype(device: torch.device, name: str = "bfloat16") -> torch.dtype | str:
    """float32 on a CPU (bf16 matmuls there are slow and lossy), ``name`` on a GPU (``auto``:
    the checkpoint's own, as ``from_pretrained`` reads it)."""
    if device.type == "cpu":
        return torch.float32
    return name if name == "auto" else getattr(torch, name)


def rope_parameters(
    checkpoint: Mapping[str, Any] | None, rope_scaling: Mapping[str, Any] | None, rope_theta: float | None
) -> dict[str, Any] | None:
    """A checkpoint's ``rope_parameters`` (transformers 5 keeps theta and scaling in one dict) with
    Trinity-RFT's ``model.rope_scaling`` / ``rope_theta`` over them; None when neither is set. The
    one place the engines (transformers, torch, vLLM's ``hf_overrides``) get their RoPE from, so
    rollout and training rotate alike (verl's ``override_config`` cannot carry it: refused there)."""
    if rope_scaling is None and rope_theta is None:
        return None
    params = dict(checkpoint or {})
    scaling = dict(rope_scaling or {})
    if "type" in scaling:  # the older name of rope_type
        scaling.setdefault("rope_type", scaling.pop("type"))
    params.update(scaling)
    if rope_theta is not None:
        params["rope_theta"] = rope_theta
    return params


def rope_override(
    path: str, trust_remote_code: bool, rope_scaling: Mapping[str, Any] | None, rope_theta: float | None
) -> dict[str, Any] | None:
    """``rope_parameters`` of the checkpoint at ``path`` with the overrides (None, and nothing read,
    without any): for an engine that takes a whole config value (vLLM's ``hf_overrides``)."""
    if rope_scaling is None and rope_theta is None:
        return None
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    return rope_parameters(getattr(config, "rope_parameters", None), rope_scaling, rope_theta)


def load_model(
    path: str, dtype: torch.dtype | str, trust_remote_code: bool = False, rope: tuple[Any, Any] = (None, None)
) -> torch.nn.Module:
    """The causal LM at ``path``: ``AutoModelForCausalLM``, or ``AutoModelForImageTextToText`` for
    a vision-language model (a config with a ``vision_config``); ``rope``: ``(rope_scaling,
    rope_theta)`` over the checkpoint's (``rope_parameters``)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    params = rope_parameters(getattr(config, "rope_parameters", None), *rope)
    if params is not None:
        config.rope_parameters = params
    auto = AutoModelForImageTextToText if getattr(config, "vision_config", None) is not None else AutoModelForCausalLM
    return auto.from_pretrained(path, config=config, dtype=dtype, trust_remote_code=trust_remote_code)


def load_critic(path: str, trust_remote_code: bool = False) -> torch.nn.Module:
    """A critic at ``path``: ``AutoModelForTokenClassification`` with one label (the base model
    plus a value head, as verl's), dropout off; a new value head starts at zero (V = 0)."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    config = AutoConfig.from_pretrained(path, num_labels=1, trust_remote_code=trust_remote_code)
    # set, not passed: transformers 5 drops from_pretrained kwargs the config class lacks
    # (Qwen2's has no classifier_dropout), which left the value head with dropout 0.1
    config.classifier_dropout = 0.0
    critic, info = AutoModelForTokenClassification.from_pretrained(
        path, config=config, dtype=torch.float32, output_loading_info=True, trust_remote_code=trust_remote_code
    )
    if any(key.startswith("score.") for key in info["missing_keys"]):
        torch.nn.init.zeros_(critic.score.weight)  # deterministic, whatever the seed
        torch.nn.init.zeros_(critic.score.bias)
    return critic


def response_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    width: int,
    media: MediaInputs | None = None,
) -> torch.Tensor:
    """float32 logits ``[B, width, V]`` that predicted the last ``width`` tokens of each row; only
    the last ``width + 1`` positions go through the LM head (``logits_to_keep``). With ``media``
    (the rows' image tensors, ``collate_media``) the model places the images itself: their
    positions (Qwen2-VL's 3-D rope) are its own, from the tokens and the mask."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=None if media else position_ids,
        logits_to_keep=width + 1,
        use_cache=False,
        **(model_media(model, input_ids, media) if media else {}),
    )
    return out.logits[:, :-1].float()


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    width: int,
    with_entropy: bool = False,
    media: MediaInputs | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs ``[B, width]`` of the last ``width`` tokens of each row, each given its prefix,
    and (``with_entropy``) the entropy of the distributions that predicted them. Runs with grad
    when the caller has grad enabled."""
    logits = response_logits(model, input_ids, attention_mask, position_ids, width, media)
    normaliser = logits.logsumexp(-1)
    logprobs = logits.gather(-1, input_ids[:, -width:].unsqueeze(-1)).squeeze(-1) - normaliser
    if not with_entropy:
        return logprobs, None
    entropy = normaliser - (logits.softmax(-1) * logits).sum(-1)
    return logprobs, entropy


def entropy_scores(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[B, R, 2]`` from logits ``[B, R, V]`` and the sampled ``tokens [B, R]``: each token's
    entropy score ``S = p (H + log p)`` and its expectation over the vocabulary
    ``N = sum_a p_a^2 (log p_a + H)``.

    A policy-gradient step with advantage ``A`` on token ``k`` moves the entropy by about
    ``-eta A (S_k - N)`` (the entropy's derivative along the softmax gradient), which is
    what the ``clipb`` / ``clipv`` advantages read to spare the entropy.
    """
    log_p = logits.float().log_softmax(-1)
    p = log_p.exp()
    entropy = -(p * log_p).sum(-1, keepdim=True)
    token = log_p.gather(-1, tokens.unsqueeze(-1))
    expected = (p * p * (log_p + entropy)).sum(-1, keepdim=True)
    return torch.cat([token.exp() * (entropy + token), expected], dim=-1)


def read_hf_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the ``*.safetensors`` files in a HF model directory (or in the actor's
    HF folder of a training checkpoint)."""
    path = Path(directory)
    files = sorted(path.glob("*.safetensors")) or sorted((path / ACTOR_HF_SUBDIR).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path} or {path / ACTOR_HF_SUBDIR}")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(str(file)))
    return weights


def load_weights_into(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Copy ``state_dict`` into ``model`` in place; a subset of the weights is accepted (partial
    sync), a name the model does not have is an error. A LoRA adapter model takes its adapter's
    tensors alone (``trinity.model.lora.load_adapter_state``)."""
    if is_adapter_model(model):
        load_adapter_state(model, state_dict)
        return
    with torch.no_grad():
        result = model.load_state_dict(state_dict, strict=False)
    if result.unexpected_keys:
        raise KeyError(f"weights not in the model: {result.unexpected_keys[:5]} ({len(result.unexpected_keys)} in all)")

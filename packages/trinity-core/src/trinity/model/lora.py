"""LoRA adapters (peft) on the reference engines: ``model.lora_configs`` as Trinity-RFT reads it.

One adapter: rank ``lora_rank``, scaling ``lora_alpha / lora_rank``, on ``target_modules``
(``all-linear``: every linear layer but the LM head) less ``exclude_modules``; no dropout (the
trainer's logprobs must match the rollout's). Without a ``path`` the adapter starts fresh
(``B = 0``). Only the adapter trains and moves: ``adapter_state`` is what the trainer syncs and
checkpoints, ``load_adapter_state`` what a rollout engine loads; the frozen base is the
reference model. docs/engines.md has the details.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trinity.config.schema import LoRAConfig

ADAPTER_CONFIG = "adapter_config.json"
"""The file that makes a folder a peft adapter (next to ``adapter_model.safetensors``)."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def _modules(value: str | list[str] | None) -> str | list[str] | None:
    """peft's form of a module list: ``all-linear``, a list of names, or a regex (a string
    peft matches against whole module paths). Comma-separated names become a list, and so does
    one plain name (as a string peft would read it as a regex of the whole path)."""
    if value is None or isinstance(value, list) or value == "all-linear":
        return value
    if any(c in value for c in "*[]()|\\") and "," not in value:
        return value
    return [name.strip() for name in value.split(",") if name.strip()]


def peft_config(lora: LoRAConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=lora.lora_rank,
        lora_alpha=lora.lora_alpha,
        target_modules=_modules(lora.target_modules),
        exclude_modules=_modules(lora.exclude_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )


def with_adapter(model: torch.nn.Module, lora: LoRAConfig, trainable: bool) -> torch.nn.Module:
    """``model`` (a causal LM) wrapped with the adapter ``lora`` describes; only the adapter's
    parameters require grad (none when not ``trainable``)."""
    from peft import PeftModel, get_peft_model

    if lora.path:
        return PeftModel.from_pretrained(model, lora.path, is_trainable=trainable)
    wrapped = get_peft_model(model, peft_config(lora))
    if not trainable:
        wrapped.requires_grad_(False)
    return wrapped


def describe_adapter(model: torch.nn.Module) -> str:
    """The adapter's size against the whole model, for the log line a LoRA run starts with."""
    trainable, total = model.get_nb_trainable_parameters()
    size = sum(tensor.nbytes for tensor in adapter_state(model).values())
    return f"{trainable:,} of {total:,} parameters ({trainable / total:.1%}), {size / 2**20:.2f} MiB"


def fresh_adapter_state(model_path: str, lora: LoRAConfig, trust_remote_code: bool = False) -> dict[str, torch.Tensor]:
    """A fresh adapter's tensors for the model at ``model_path``, all zeros (base + adapter is the
    base), shaped on the meta device (no weights read): for an engine that must name an adapter
    before the trainer syncs one."""
    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    shapes = adapter_state(get_peft_model(model, peft_config(lora)))
    return {name: torch.zeros(tensor.shape, dtype=tensor.dtype) for name, tensor in shapes.items()}


def is_adapter_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model; never imports peft (1.9 s on 2 cores, paid by every
    rollout engine's first generate when it did): a model built without it cannot be one."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors (not copied), named as in ``adapter_model.safetensors``."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model)


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy adapter tensors (``adapter_state``'s names) into ``model`` in place; a name the
    adapter does not have (a full model's weights, another adapter's layout) is an error."""
    from peft import set_peft_model_state_dict

    with torch.no_grad():
        result = set_peft_model_state_dict(model, state)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise KeyError(
            f"weights not in the LoRA adapter: {unexpected[:5]} ({len(unexpected)} in all); "
            "a full model's weights cannot load into an engine that holds an adapter"
        )


def write_adapter_folder(folder: Path, state: dict[str, torch.Tensor], lora: LoRAConfig, base_model: str) -> None:
    """``state`` (``adapter_state``'s names) as a peft adapter folder, for engines that load
    adapters from disk (vLLM): its tensors and an ``adapter_config.json`` whose target modules
    are those the tensors wrap."""
    import dataclasses

    from safetensors.torch import save_file

    wrapped = sorted({name.split(".lora_")[0].rsplit(".", 1)[-1] for name in state})
    config = dataclasses.replace(
        peft_config(lora), target_modules=wrapped, exclude_modules=None, base_model_name_or_path=base_model
    )
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(folder))
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(folder / ADAPTER_WEIGHTS))


def synced_adapter_tensors(folder: str | Path) -> dict[str, torch.Tensor] | None:
    """The tensors of a folder of adapter tensors alone (a checkpoint-sync version of a LoRA run:
    ``adapter_state``'s names in ``model.safetensors``, no ``adapter_config.json``); None for a
    folder of other weights."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    for file in files:
        with safe_open(str(file), "pt") as weights:
            if not all(".lora_" in name for name in weights.keys()):  # noqa: SIM118 (safe_open has no __iter__)
                return None
    return {name: tensor for file in files for name, tensor in load_file(str(file)).items()} or None


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(path: str | Path) -> str | None:
    """The base model an adapter folder names (``base_model_name_or_path``)."""
    return json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")


def merge_adapter_folder(adapter: Path, out: Path, base: str | None = None) -> None:
    """Write the base model with the adapter at ``adapter`` merged in, as a HF model folder
    ``out`` (weights ``W + B A alpha/r``), with the adapter folder's tokenizer where it has one."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trinity.config.schema import ModelConfig
    from trinity.model.tokenization import load_tokenizer

    base = base or adapter_base(adapter)
    if not base:
        raise ValueError(f"{adapter / ADAPTER_CONFIG} names no base_model_name_or_path: give the base model")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    merged.save_pretrained(out)
    tokenizer_source = adapter if (adapter / "tokenizer_config.json").is_file() else Path(base)
    load_tokenizer(ModelConfig(model_path=str(tokenizer_source))).tokenizer.save_pretrained(out)

"""What a plugin package may use of trinity-core: the one module plugins import.

Everything a workflow, reward function, monitor, engine, sync method or algorithm function
needs is here; the rest of ``trinity`` is internal and may change without notice (a test
fails when a sibling package imports anything else of it). Importing this module is light
(no torch, ray or transformers), so a plugin module that registers names with ``hookimpl``
stays cheap to discover; the rest loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import Field

from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs, inert
from trinity.config.load import IssueCollector
from trinity.config.schema import Config, InferenceModelConfig, ModelConfig
from trinity.plugins import Kind, hookimpl, resolve
from trinity.plugins.manager import import_target

_ON_FIRST_USE = {
    **dict.fromkeys(["Batch"], "trinity.common.batch"),
    **dict.fromkeys(["PicklableError"], "trinity.common.errors"),
    **dict.fromkeys(["EID", "Experience", "TRUNCATED_FROM", "Task"], "trinity.common.experience"),
    **dict.fromkeys(["trainer_gpu_num"], "trinity.config.rules"),
    **dict.fromkeys(
        [
            "CheckpointRefused",
            "Completion",
            "EngineCrashed",
            "EngineStartError",
            "Metrics",
            "RolloutEngine",
            "SamplingArgs",
            "TrainingEngine",
            "load_plain_state",
        ],
        "trinity.model.engines",
    ),
    **dict.fromkeys(["LossFns", "Totals", "batch_totals", "critic_micro_loss"], "trinity.training.losses"),
    **dict.fromkeys(["read_hf_weights", "rope_override"], "trinity.model.torch_model"),
    **dict.fromkeys(["MediaError", "load_image"], "trinity.model.multimodal"),
    **dict.fromkeys(["PriorityFn"], "trinity.buffer.priority"),
    **dict.fromkeys(["first", "response_budget"], "trinity.model.token_budgets"),
    **dict.fromkeys(
        [
            "ChatTokenizer",
            "TOOL_CALL_PARSERS",
            "TokenizedConversation",
            "ToolCall",
            "load_tokenizer",
            "parse_hermes_tool_calls",
            "tool_schemas",
        ],
        "trinity.model.tokenization",
    ),
    **dict.fromkeys(["EngineClient"], "trinity.rollout.client"),
    **dict.fromkeys(["endpoint_port", "guarded"], "trinity.rollout.openai_api"),
    **dict.fromkeys(["door_server"], "trinity.common.http_guard"),
    **dict.fromkeys(["ModelWrapper"], "trinity.rollout.model_wrapper"),
    **dict.fromkeys(
        ["fresh_adapter_state", "is_adapter_folder", "synced_adapter_tensors", "write_adapter_folder"],
        "trinity.model.lora",
    ),
    **dict.fromkeys(["Workflow", "set_reward"], "trinity.explorer.workflow"),
    **dict.fromkeys(["Monitor", "MonitorError"], "trinity.monitor.base"),
    **dict.fromkeys(
        ["Fence", "SharedActor", "SyncMethod", "SyncTimeout", "WeightStore", "WeightUpdate", "find_shared_actor"],
        "trinity.synchronizer.methods",
    ),
}
"""Names imported when a plugin first reads them: discovery imports only the plugin modules,
which need ``hookimpl`` and little else."""


def __getattr__(name: str) -> Any:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Config",
    "Field",
    "InferenceModelConfig",
    "IssueCollector",
    "Kind",
    "ModelConfig",
    "PluginArgs",
    "hookimpl",
    "import_target",
    "inert",
    "lazy_module",
    "resolve",
    *_ON_FIRST_USE,
]

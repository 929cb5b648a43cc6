"""vLLM's OpenAI server arguments from the config; no vLLM needed (runs in the main suite too)."""

from __future__ import annotations

import pytest

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity_vllm.server import VLLMServer


def argv(**settings) -> list[str]:
    config = InferenceModelConfig(model_path="/models/tiny", enable_openai_api=True, **settings)
    return VLLMServer(config, ModelConfig(), "vllm engine").openai_argv(None, {})


def test_the_api_key_reaches_vllm_s_server_when_set():
    assert argv(api_key="sesame")[-2:] == ["--api-key", "sesame"]
    assert "--api-key" not in argv()  # EMPTY, Trinity-RFT's default: no key
    assert "--api-key" not in argv(api_key="")


def test_tool_and_reasoning_parsers_are_passed():
    args = argv(enable_auto_tool_choice=True, tool_call_parser="hermes", reasoning_parser="qwen3")
    assert args == [
        "--model",
        "/models/tiny",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--reasoning-parser",
        "qwen3",
    ]


def test_ignore_eos_and_request_logging_reach_vllm():
    pytest.importorskip("vllm")
    from trinity.model.engines import SamplingArgs

    config = InferenceModelConfig(model_path="/models/tiny", ignore_eos=True, enable_log_requests=True)
    server = VLLMServer(config, ModelConfig(max_model_len=64, max_response_tokens=16), "vllm engine")
    assert server.engine_args()["enable_log_requests"] is True
    assert server._params(SamplingArgs(max_tokens=8), prompt_length=4).ignore_eos is True
    default = VLLMServer(InferenceModelConfig(model_path="/models/tiny"), ModelConfig(max_model_len=64), "vllm engine")
    assert default.engine_args()["enable_log_requests"] is False
    assert default._params(SamplingArgs(max_tokens=8), prompt_length=4).ignore_eos is False


def test_data_pipeline_and_expert_parallel_reach_vllm_beside_tensor_parallel():
    """Passed to vLLM's engine as Trinity-RFT passes them; other engines refuse them at config check."""
    pytest.importorskip("vllm")
    parallel = {"tensor_parallel_size": 2, "data_parallel_size": 2, "pipeline_parallel_size": 3}
    config = InferenceModelConfig(model_path="/models/tiny", enable_expert_parallel=True, **parallel)
    args = VLLMServer(config, ModelConfig(max_model_len=64), "vllm engine").engine_args()
    assert {key: args[key] for key in [*parallel, "enable_expert_parallel"]} == {
        **parallel,
        "enable_expert_parallel": True,
    }
    assert config.ranks_per_engine() == 12  # the GPUs the engine's actor asks Ray for


def test_rope_overrides_reach_vllm_as_the_checkpoint_s_rope_parameters_updated(tiny_model_dir):
    pytest.importorskip("vllm")
    path = str(tiny_model_dir)
    model = ModelConfig(max_model_len=64, rope_theta=100.0, rope_scaling={"rope_type": "linear", "factor": 2.0})
    args = VLLMServer(InferenceModelConfig(model_path=path), model, "vllm engine").engine_args()
    assert args["hf_overrides"] == {"rope_parameters": {"rope_theta": 100.0, "rope_type": "linear", "factor": 2.0}}
    assert "hf_overrides" not in VLLMServer(InferenceModelConfig(model_path=path), ModelConfig(), "e").engine_args()


def test_lora_settings_reach_vllm():
    """``model.lora_configs`` and the model's vLLM LoRA keys become vLLM's engine arguments (one
    adapter slot; a rank between vLLM's slot sizes takes the larger)."""
    pytest.importorskip("vllm")
    from trinity.config.schema import LoRAConfig

    model = ModelConfig(
        max_model_len=64,
        lora_configs=[LoRAConfig(lora_rank=12, lora_dtype="bfloat16")],
        fully_sharded_loras=True,
        max_cpu_loras=3,
    )
    args = VLLMServer(InferenceModelConfig(model_path="/models/tiny", enable_lora=True), model, "e").engine_args()
    assert {
        k: args[k]
        for k in ("enable_lora", "max_loras", "max_lora_rank", "fully_sharded_loras", "max_cpu_loras", "lora_dtype")
    } == {
        "enable_lora": True,
        "max_loras": 1,
        "max_lora_rank": 16,
        "fully_sharded_loras": True,
        "max_cpu_loras": 3,
        "lora_dtype": "bfloat16",
    }
    assert "enable_lora" not in VLLMServer(InferenceModelConfig(model_path="/models/tiny"), model, "e").engine_args()

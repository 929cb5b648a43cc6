"""``trinity tiny-model --arch qwen3_moe``: the MoE model router replay is tested on, built by the
CLI and loadable by transformers with its top-k routers. About 3 s."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from transformers import AutoModelForCausalLM

from trinity.cli import main
from trinity.model.moe_routing import moe_routers


def test_the_cli_builds_the_tiny_moe_model(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["tiny-model", str(tmp_path), "--arch", "qwen3_moe", "--num-layers", "3"])
    assert result.exit_code == 0, result.output
    assert "tiny qwen3_moe model written" in result.output
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert model.config.model_type == "qwen3_moe"
    assert [(router.num_experts, router.top_k) for router in moe_routers(model)] == [(8, 2)] * 3


def test_an_unknown_arch_is_refused_with_the_choices(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["tiny-model", str(tmp_path), "--arch", "llama"])
    assert result.exit_code == 2
    assert "'qwen2'" in result.output and "'qwen3_moe'" in result.output

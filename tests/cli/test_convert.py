"""``trinity convert`` of a torch-engine checkpoint: the folder loads with transformers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from transformers import AutoModelForCausalLM, AutoTokenizer

from helpers.engine_helpers import make_config
from trinity.cli import main
from trinity.report import record_config
from trinity.training.torch_trainer import TorchTrainingEngine


@pytest.fixture(scope="module")
def job(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A job folder with two checkpoints of the torch engine; the later one's actor weights."""
    folder = tmp_path_factory.mktemp("job")
    config = make_config(tiny_model_dir)
    config.checkpoint_job_dir = str(folder)
    record_config(config)
    engine = TorchTrainingEngine(config)
    engine.save_checkpoint(str(folder / "global_step_1"), step=1)
    with torch.no_grad():  # the weights a later step would have: not the starting model's
        for parameter in engine.actor.parameters():
            parameter.add_(0.01)
    engine.save_checkpoint(str(folder / "global_step_2"), step=2)
    return folder, {name: tensor.clone() for name, tensor in engine.actor.state_dict().items()}


def convert(*args: str):
    return CliRunner().invoke(main, ["convert", *map(str, args)])


def test_a_job_folder_converts_from_its_latest_checkpoint_and_loads(job, tmp_path):
    folder, weights = job
    result = convert(folder, tmp_path / "hf")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{folder / 'global_step_2'} -> {tmp_path / 'hf'} (exported by torch)"
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer("1 + 2 =")["input_ids"]


def test_a_step_folder_converts_without_the_runs_record(job, tmp_path):
    folder, _ = job
    step = tmp_path / "global_step_1"
    shutil.copytree(folder / "global_step_1", step)  # no config.yaml beside it: the default export
    result = convert(step / "actor", tmp_path / "hf")
    assert result.exit_code == 0, result.output
    assert "exported by the HF weights it holds" in result.output
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "hf").config.model_type == "qwen2"


def test_bad_input_is_named(job, tmp_path):
    folder, _ = job
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    assert "exists and is not an empty folder" in convert(folder, taken).output
    assert "not a checkpoint" in convert(tmp_path / "taken", tmp_path / "out").output
    unknown = convert("--engine", "torhc", folder, tmp_path / "out2")
    assert unknown.exit_code == 2 and "did you mean 'torch'" in unknown.output
    sharded = tmp_path / "global_step_3"
    (sharded / "actor" / "huggingface").mkdir(parents=True)
    (sharded / "actor" / "model_world_size_2_rank_0.pt").write_bytes(b"")
    result = convert(sharded, tmp_path / "out3")
    assert result.exit_code == 2 and "holds no Hugging Face weights" in result.output and "--engine" in result.output


@pytest.fixture(scope="module")
def lora_job(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A torch-engine LoRA checkpoint whose adapter moved off zero; the actor's merged weights."""
    from trinity.config.schema import LoRAConfig

    folder = tmp_path_factory.mktemp("lora_job")
    config = make_config(tiny_model_dir, model__lora_configs=[LoRAConfig(lora_rank=4, lora_alpha=8)])
    config.checkpoint_job_dir = str(folder)
    record_config(config)
    engine = TorchTrainingEngine(config)
    with torch.no_grad():
        for name, parameter in engine.actor.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    engine.save_checkpoint(str(folder / "global_step_1"), step=1)
    merged = engine.actor.merge_and_unload()
    return folder, {name: tensor.clone() for name, tensor in merged.state_dict().items()}


def test_a_lora_checkpoint_converts_to_the_merged_model(lora_job, tiny_model_dir, tmp_path):
    folder, weights = lora_job
    result = convert(folder, tmp_path / "merged")
    assert result.exit_code == 0, result.output
    assert f"(exported by merging the LoRA adapter into {tiny_model_dir})" in result.output
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    moved = 0
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=1e-6)
        moved += not torch.equal(tensor, base.state_dict()[name])
    assert moved == 7 * 2  # every adapted linear of the 2 layers, nothing else
    assert AutoTokenizer.from_pretrained(tmp_path / "merged")("1 + 2 =")["input_ids"]


def test_a_lora_checkpoint_converts_to_the_adapter_alone(lora_job, tiny_model_dir, tmp_path):
    from peft import PeftModel

    folder, weights = lora_job
    result = convert(folder, tmp_path / "adapter", "--adapter")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "adapter" / "model.safetensors").exists()
    adapter_bytes = (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size
    assert adapter_bytes < (tiny_model_dir / "model.safetensors").stat().st_size / 10
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "adapter")
    for name, tensor in model.merge_and_unload().state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=1e-6)


def test_convert_lora_refusals(lora_job, job, tmp_path):
    result = convert(job[0], tmp_path / "a", "--adapter")
    assert result.exit_code == 2 and "holds the full model, not a LoRA adapter" in result.output
    result = convert(lora_job[0], tmp_path / "b", "--base-model", tmp_path / "nowhere")
    assert result.exit_code == 2 and "--base-model" in result.output

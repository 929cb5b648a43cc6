"""The tiny Qwen2-VL model through the transformers engine and the torch trainer: a prompt's image
tensors ride with its experience through the buffer's serialisation, and the trainer's logprobs
over them equal the engine's; the pixels matter; what cannot be used is refused by name."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from helpers.engine_helpers import make_config, train_mode_trainer
from helpers.mm_tasks import COLOURS, draw
from trinity.buffer.errors import SerializationError
from trinity.buffer.serialization import (
    deserialize_experience,
    experience_from_dict,
    experience_to_dict,
    serialize_experience,
)
from trinity.common.batch import Batch
from trinity.common.experience import EID
from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.model.multimodal import MediaError
from trinity.rollout.model_wrapper import _to_experience
from trinity.rollout.transformers_rollout import TransformersRolloutEngine
from trinity.training.torch_trainer import TorchTrainingEngine


def make_engine(path: Path, **inference) -> TransformersRolloutEngine:
    return TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(path), engine_type="transformers", **inference),
        ModelConfig(model_path=str(path), max_prompt_tokens=64, max_response_tokens=6),
    )


@pytest.fixture(scope="module")
def engine(tiny_vl_model_dir: Path) -> TransformersRolloutEngine:
    return make_engine(tiny_vl_model_dir)


def ask(image, question: str = "What colour is the shape?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}]


def test_trainer_logprobs_equal_the_engines_over_the_same_pixels(engine, tiny_vl_model_dir: Path) -> None:
    rng = random.Random(0)
    conversations = [ask(draw("square", c, rng)) for c in COLOURS] + [[{"role": "user", "content": "text only"}]]
    completions = engine.chat(conversations, SamplingArgs(n=2, temperature=1.0, max_tokens=6, seed=1))
    experiences = [
        deserialize_experience(serialize_experience(_to_experience(c, m)))  # through the buffer's bytes
        for row, m in zip(completions, conversations, strict=True)
        for c in row
    ]
    images = 2 * len(COLOURS)  # rows with an image: two samples of each colour
    assert [e.multi_modal_inputs is not None for e in experiences] == [True] * images + [False] * 2
    assert experiences[0].messages[0]["content"][0] == {"type": "image"}  # the pixels travel as tensors only
    trainer = TorchTrainingEngine(make_config(tiny_vl_model_dir))
    batch = Batch.from_experiences(experiences)
    recomputed = trainer.compute_logprobs(batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(recomputed[mask], batch.old_logprobs[mask], atol=1e-5, rtol=0)
    # the pixels matter: each image row given another colour's pixels scores otherwise
    media = batch.multi_modal_inputs
    swapped = media[2:images] + media[:2] + media[images:]
    other = trainer.compute_logprobs(batch.with_fields(multi_modal_inputs=swapped))
    assert (other[:images][mask[:images]] - batch.old_logprobs[:images][mask[:images]]).abs().max() > 1e-3
    # the file storage's JSON form keeps them too
    again = experience_from_dict(experience_to_dict(experiences[0]))
    assert torch.equal(again.multi_modal_inputs["pixel_values"], experiences[0].multi_modal_inputs["pixel_values"])


def test_a_stored_row_with_other_media_keys_is_refused(engine) -> None:
    (completion,) = engine.chat([ask(draw("circle", "red", random.Random(1)))], SamplingArgs(max_tokens=2))[0]
    experience = _to_experience(completion, ask("x.png"))
    experience.multi_modal_inputs["input_embeds"] = torch.zeros(1)
    with pytest.raises(SerializationError, match=r"multi_modal_inputs holds \['input_embeds'\]"):
        serialize_experience(experience)


def test_videos_and_images_a_model_cannot_take_are_refused_by_name(engine, tiny_model_dir: Path) -> None:
    video = [
        {"role": "user", "content": [{"type": "video", "video": ["a.png", "b.png"]}, {"type": "text", "text": "?"}]}
    ]
    with pytest.raises(MediaError, match="videos need transformers' video processor, which needs torchvision"):
        engine.chat([video], SamplingArgs(max_tokens=2))
    with pytest.raises(MediaError, match="image 1 of the prompt: file /no/such.png: no such file"):
        engine.chat([ask("/no/such.png")], SamplingArgs(max_tokens=2))
    text_engine = make_engine(tiny_model_dir)
    with pytest.raises(MediaError, match="takes no images"):
        text_engine.chat([ask(draw("circle", "red", random.Random(1)))], SamplingArgs(max_tokens=2))
    with pytest.raises(MediaError, match="enable_multimodal: the model at .* has no vision tower"):
        make_engine(tiny_model_dir, enable_multimodal=True)


def test_a_trainer_engine_that_takes_no_images_refuses_them(engine, tiny_vl_model_dir: Path, tmp_path: Path) -> None:
    conversation = ask(draw("square", "green", random.Random(2)))
    experiences = [_to_experience(c, conversation) for c in engine.chat([conversation], SamplingArgs(n=2))[0]]
    for run, exp in enumerate(experiences):
        exp.reward, exp.eid = float(run), EID(task="0", run=run)
    trainer = train_mode_trainer(tmp_path, tiny_vl_model_dir)
    trainer.engine.takes_images = False  # as verl's engine: it would drop the pixels
    with pytest.raises(ValueError, match="trainer.trainer_type torch: experiences with images need a trainer"):
        trainer.train_step(experiences)

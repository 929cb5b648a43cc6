"""The binary experience format: every field round-trips; other versions are refused."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from buffer_helpers import make_experience

from trinity.buffer import SerializationError
from trinity.buffer.serialization import (
    FORMAT_VERSION,
    MAGIC,
    TENSOR_FIELDS,
    deserialize_experience,
    deserialize_experiences,
    experience_from_dict,
    experience_to_dict,
    serialize_experience,
    serialize_experiences,
)
from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience


def full_experience() -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3, 151_000, 5, 6], dtype=torch.long),
        prompt_length=3,
        logprobs=torch.tensor([-0.5, -1.5, -0.25]),
        reward=0.75,
        token_level_reward=torch.tensor([0.0, 0.0, 0.75]),
        advantages=torch.tensor([0.1, 0.2, 0.3], dtype=torch.bfloat16),
        returns=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64),
        action_mask=torch.tensor([True, False, True]),
        eid=EID(batch="7", task="t3", run=2, step=1, suffix="x"),
        model_version=5,
        truncate_status="response_truncated",
        messages=[{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "hi"}],
        metrics={"acc": 1.0},
        info={"source": "gsm8k", "n": [1, 2]},
    )


def assert_same(a: Experience, b: Experience) -> None:
    for name in TENSOR_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y), name
    for name in ("prompt_length", "reward", "eid", "model_version", "truncate_status", "messages", "metrics", "info"):
        assert getattr(a, name) == getattr(b, name), name


def test_every_field_round_trips():
    exp = full_experience()
    assert_same(exp, deserialize_experience(serialize_experience(exp)))


def test_dpo_and_empty_tensors_round_trip():
    exp = Experience(
        tokens=torch.tensor([4, 5]),
        prompt_length=2,
        chosen=torch.tensor([7, 8, 9]),
        rejected=torch.tensor([], dtype=torch.long),
    )
    assert_same(exp, deserialize_experience(serialize_experience(exp)))


def test_token_ids_beyond_int32_keep_int64():
    exp = Experience(tokens=torch.tensor([1, 2**40]), prompt_length=1)
    assert torch.equal(deserialize_experience(serialize_experience(exp)).tokens, exp.tokens)


def test_info_json_cannot_hold_is_converted_to_plain_values():
    exp = make_experience(1)
    exp.info = {"when": {1, 2}, "score": np.float32(0.5), "ids": np.array([3, 4]), "t": torch.tensor([1.5])}
    exp.metrics = {"steps": np.int64(3)}
    back = deserialize_experience(serialize_experience(exp))
    assert back.info == {"when": [1, 2], "score": 0.5, "ids": [3, 4], "t": [1.5]}
    assert back.metrics == {"steps": 3} and type(back.metrics["steps"]) is int


def test_an_object_the_buffer_cannot_store_is_named_not_pickled():
    exp = make_experience(1)
    exp.info = {"env": {"state": object()}}
    with pytest.raises(SerializationError, match=r"experience\.info\['env'\]\['state'\] holds a object"):
        serialize_experience(exp)


class _Payload:
    """What a row forged by whoever can write the buffer's database could hold."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_row_with_a_pickled_header_is_refused_unrun(tmp_path):
    """Codec 1 (a pickled header, as trinity wrote for exotic info values before) is never
    unpickled: its code would run in the trainer."""
    marker = tmp_path / "ran"
    meta = pickle.dumps({"p": 1, "r": 0.0, "i": _Payload(marker), "t": []})
    blob = struct.pack("<3sBBI", MAGIC, FORMAT_VERSION, 1, len(meta)) + meta
    with pytest.raises(SerializationError, match="pickled header .* not read"):
        deserialize_experience(blob)
    assert not marker.exists()


def test_list_round_trip_and_collation():
    experiences = [full_experience(), make_experience(3)]
    back = deserialize_experiences(serialize_experiences(experiences))
    for a, b in zip(experiences, back, strict=True):
        assert_same(a, b)
    batch = Batch.from_experiences(back)
    assert batch.input_ids.shape[0] == 2 and torch.equal(batch.rewards, torch.tensor([0.75, 3.0]))


def test_compact_size():
    exp = Experience(tokens=torch.randint(0, 150_000, (1024,)), prompt_length=256, logprobs=torch.randn(768))
    assert len(serialize_experience(exp)) < 1024 * 4 + 768 * 4 + 400  # int32 ids, float32 logprobs, small header


def test_unknown_version_is_refused_clearly():
    blob = bytearray(serialize_experience(make_experience(0)))
    blob[3] = FORMAT_VERSION + 1
    with pytest.raises(
        SerializationError, match=f"format version {FORMAT_VERSION + 1}; this trinity reads version {FORMAT_VERSION}"
    ):
        deserialize_experience(bytes(blob))
    listed = bytearray(serialize_experiences([make_experience(0)]))
    struct.pack_into("<B", listed, 4, 9)
    with pytest.raises(SerializationError, match="format version 9"):
        deserialize_experiences(bytes(listed))


def test_garbage_is_refused():
    with pytest.raises(SerializationError, match="bad magic"):
        deserialize_experience(b"not an experience")
    with pytest.raises(SerializationError, match="bad magic"):
        deserialize_experiences(b"")


def test_dict_form_round_trips():
    exp = full_experience()
    exp.advantages = exp.advantages.float()
    exp.returns = exp.returns.float()
    assert_same(exp, experience_from_dict(experience_to_dict(exp)))

"""Compact binary form of experiences: a small JSON header plus raw tensor bytes, never pickle.

One experience is ``MAGIC | version | codec | header length | header | tensors``: the header holds
the scalar fields and each tensor's name, stored dtype, shape and dtype to restore; the tensors
follow as raw little-endian bytes, each 8-byte aligned (token ids stored as int32). A list is
``LIST_MAGIC | version | count | (length | experience)*``. A row may come from a database other
jobs can write, so ``info``, ``metrics`` and ``messages`` hold JSON values only (anything else is a
``SerializationError`` naming where), and a pickled row of an older trinity (codec 1) is refused
unless ``trust_pickled_rows`` (``docs/security.md``; ``trinity buffer migrate`` rewrites them).
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import PurePath
from typing import Any

import numpy as np
import torch

from trinity.buffer.errors import SerializationError
from trinity.common.experience import EID, MEDIA_KEYS, Experience

FORMAT_VERSION = 1
MAGIC = b"TRX"
LIST_MAGIC = b"TRXL"
_HEAD = struct.Struct("<3sBBI")  # magic, version, header codec, header length
_LIST_HEAD = struct.Struct("<4sBI")  # magic, version, count
_LEN = struct.Struct("<I")
_JSON, _PICKLE = 0, 1
"""The header codec byte: JSON; pickle was written before 2026-11-27 and is read only when trusted."""
PICKLED_ROW = (
    "a stored experience with a pickled header (codec 1, written by a trinity before 2026-11-27 for an info value "
    "JSON could not hold): not read, since unpickling runs whatever code the row's writer put there. If only you "
    "ever wrote this store, rewrite it without pickle (trinity buffer migrate), or set the buffer's "
    "trust_pickled_rows: true"
)
TENSOR_FIELDS = (  # the Experience fields that hold tensors
    "tokens",
    "logprobs",
    "token_level_reward",
    "advantages",
    "returns",
    "action_mask",
    "chosen",
    "rejected",
    "teacher_logprobs",
    "routed_experts",
)
MEDIA_PREFIX = "mm:"
"""Stored tensor names of ``Experience.multi_modal_inputs``' entries: ``mm:pixel_values``..."""
_TOKEN_FIELDS = frozenset({"tokens", "chosen", "rejected"})
_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
    )
}
_INT32 = torch.iinfo(torch.int32)


def _pad(n: int) -> int:
    return -n % 8


def _stored(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as it is written: contiguous, on the CPU, token ids narrowed to int32."""
    tensor = tensor.detach().cpu().contiguous()
    if name in _TOKEN_FIELDS and tensor.dtype == torch.int64 and tensor.numel():
        low, high = torch.aminmax(tensor)
        if _INT32.min <= int(low) and int(high) <= _INT32.max:
            return tensor.to(torch.int32)
    return tensor


def serialize_experience(exp: Experience) -> bytes:
    """One experience as bytes (see the module docstring for the layout)."""
    specs, chunks = [], []
    media = {MEDIA_PREFIX + key: value for key, value in _media_items(exp.multi_modal_inputs)}
    for name, value in [*((name, getattr(exp, name)) for name in TENSOR_FIELDS), *media.items()]:
        if value is None:
            continue
        stored = _stored(name, value)
        specs.append([name, _dtype_name(stored.dtype), list(stored.shape), _dtype_name(value.dtype)])
        raw = stored.view(torch.uint8).numpy().tobytes() if stored.numel() else b""
        chunks.append(raw + b"\0" * _pad(len(raw)))
    e = exp.eid
    header: dict[str, Any] = {
        "p": exp.prompt_length, "r": exp.reward, "e": [e.batch, e.task, e.run, e.step, e.suffix, e.explorer],
        "v": exp.model_version, "ts": exp.truncate_status, "m": exp.messages, "mt": exp.metrics,
        "i": exp.info, "t": specs,
    }  # fmt: skip
    try:
        meta = json.dumps(header, separators=(",", ":")).encode()
    except (TypeError, ValueError):  # numpy values, sets...: converted, or an error naming where
        meta = json.dumps(_plain(header, "experience"), separators=(",", ":")).encode()
    meta += b" " * _pad(_HEAD.size + len(meta))
    return b"".join([_HEAD.pack(MAGIC, FORMAT_VERSION, _JSON, len(meta)), meta, *chunks])


_FIELDS = {"m": "messages", "mt": "metrics", "i": "info"}
"""Header keys of the free-form fields, by their ``Experience`` names (for errors)."""


def _child(where: str, key: Any) -> str:
    """Where ``key`` of the dict at ``where`` is: ``experience.info``, then ``experience.info['env']``."""
    return f"{where}.{_FIELDS.get(key, key)}" if where == "experience" else f"{where}[{key!r}]"


def _plain(value: Any, where: str) -> Any:
    """``value`` as JSON's types (see the module docstring); ``where`` names it in an error."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {key: _plain(item, _child(where, key)) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, torch.Tensor | np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, PurePath):
        return str(value)
    raise SerializationError(
        f"{where} holds a {type(value).__name__}, which the buffer does not store: only strings, numbers, "
        "booleans, None, lists and dicts (and numpy/torch values, sets, tuples and paths, converted) are kept, "
        "never pickled objects (a stored pickle runs code when read); convert it to one of those"
    )


def _media_items(media: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The entries of ``multi_modal_inputs``; a key outside ``MEDIA_KEYS`` is a ``SerializationError``
    (a row read back hands them to the model as keyword arguments)."""
    unknown = sorted(set(media or {}) - MEDIA_KEYS)
    if unknown:
        raise SerializationError(
            f"experience.multi_modal_inputs holds {unknown}: the buffer keeps only {sorted(MEDIA_KEYS)}"
        )
    return list((media or {}).items())


def _dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise SerializationError(f"cannot serialise tensors of dtype {dtype}")
    return name


def _check_version(version: int, what: str) -> None:
    if version != FORMAT_VERSION:
        raise SerializationError(
            f"{what} has format version {version}; this trinity reads version {FORMAT_VERSION} "
            "(written by another trinity release?)"
        )


def is_pickled(blob: bytes | bytearray | memoryview) -> bool:
    """Whether a stored experience has a pickled header (codec 1), without reading it."""
    return len(blob) >= _HEAD.size and bytes(blob[:3]) == MAGIC and blob[4] == _PICKLE


def deserialize_experience(blob: bytes | bytearray | memoryview, trust_pickle: bool = False) -> Experience:
    """The experience ``serialize_experience`` wrote; tensors are fresh CPU tensors. A pickled
    header (an older trinity's) is read only with ``trust_pickle``."""
    buf = bytearray(blob)
    if len(buf) < _HEAD.size or buf[:3] != MAGIC:
        raise SerializationError("not a serialised experience (bad magic bytes)")
    _, version, codec, meta_len = _HEAD.unpack_from(buf)
    _check_version(version, "serialised experience")
    meta = bytes(buf[_HEAD.size : _HEAD.size + meta_len])
    if codec == _PICKLE and trust_pickle:
        header = pickle.loads(meta)  # noqa: S301 - its owner vouched for the store
    elif codec == _JSON:
        header = json.loads(meta)
    else:
        raise SerializationError(PICKLED_ROW if codec == _PICKLE else f"unknown header codec {codec}")
    offset = _HEAD.size + meta_len
    tensors: dict[str, torch.Tensor] = {}
    for name, stored, shape, restore in header["t"]:
        dtype = _DTYPES[stored]
        count = 1
        for dim in shape:
            count *= dim
        nbytes = count * dtype.itemsize
        if count:
            flat = torch.frombuffer(buf, dtype=dtype, count=count, offset=offset)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape).to(_DTYPES[restore])
        offset += nbytes + _pad(nbytes)
    media = {
        name.removeprefix(MEDIA_PREFIX): tensors.pop(name) for name in list(tensors) if name.startswith(MEDIA_PREFIX)
    }
    unknown = sorted(set(tensors) - set(TENSOR_FIELDS)) + sorted(set(media) - MEDIA_KEYS)
    if unknown:
        raise SerializationError(f"a stored experience holds tensors {unknown}, which no experience has: not read")
    return Experience(
        multi_modal_inputs=media or None,
        prompt_length=header["p"], reward=header["r"], eid=EID(*header["e"]), model_version=header["v"],
        truncate_status=header["ts"], messages=header["m"], metrics=header["mt"], info=header["i"], **tensors,
    )  # fmt: skip


def serialize_experiences(experiences: list[Experience]) -> bytes:
    """A list of experiences as one blob."""
    parts = [_LIST_HEAD.pack(LIST_MAGIC, FORMAT_VERSION, len(experiences))]
    for exp in experiences:
        blob = serialize_experience(exp)
        parts += [_LEN.pack(len(blob)), blob]
    return b"".join(parts)


def deserialize_experiences(blob: bytes | bytearray | memoryview) -> list[Experience]:
    """The list ``serialize_experiences`` wrote."""
    view = memoryview(blob)
    if len(view) < _LIST_HEAD.size or bytes(view[:4]) != LIST_MAGIC:
        raise SerializationError("not a serialised experience list (bad magic bytes)")
    _, version, count = _LIST_HEAD.unpack_from(view)
    _check_version(version, "serialised experience list")
    offset, out = _LIST_HEAD.size, []
    for _ in range(count):
        (length,) = _LEN.unpack_from(view, offset)
        out.append(deserialize_experience(view[offset + _LEN.size : offset + _LEN.size + length]))
        offset += _LEN.size + length
    return out


def experience_to_dict(exp: Experience) -> dict[str, Any]:
    """A JSON-ready dict (tensors as lists): the readable form the ``file`` storage writes."""
    out: dict[str, Any] = {
        name: getattr(exp, name).tolist() for name in TENSOR_FIELDS if getattr(exp, name) is not None
    }
    media = _media_items(exp.multi_modal_inputs)
    if media:
        out["multi_modal_inputs"] = {key: {"dtype": _dtype_name(v.dtype), "data": v.tolist()} for key, v in media}
    e = exp.eid
    out.update(
        prompt_length=exp.prompt_length, reward=exp.reward, model_version=exp.model_version,
        eid={"batch": e.batch, "task": e.task, "run": e.run, "step": e.step, "suffix": e.suffix, "explorer": e.explorer},
        truncate_status=exp.truncate_status, messages=exp.messages, metrics=exp.metrics, info=exp.info,
    )  # fmt: skip
    return out


_LIST_DTYPES = {
    "tokens": torch.long,
    "chosen": torch.long,
    "rejected": torch.long,
    "action_mask": None,
    "routed_experts": torch.int16,
}


def experience_from_dict(row: dict[str, Any]) -> Experience:
    """The experience ``experience_to_dict`` wrote (token ids long, per-token values float32)."""
    tensors = {
        name: torch.tensor(row[name], dtype=_LIST_DTYPES.get(name, torch.float32))
        for name in TENSOR_FIELDS
        if row.get(name) is not None
    }
    media = {
        key: torch.tensor(v["data"], dtype=_DTYPES[v["dtype"]])
        for key, v in _media_items(row.get("multi_modal_inputs"))
    }
    return Experience(
        multi_modal_inputs=media or None,
        prompt_length=row["prompt_length"], reward=row.get("reward"), eid=EID(**row.get("eid", {})),
        model_version=row.get("model_version", 0), truncate_status=row.get("truncate_status"),
        messages=row.get("messages"), metrics=row.get("metrics") or {}, info=row.get("info") or {}, **tensors,
    )  # fmt: skip

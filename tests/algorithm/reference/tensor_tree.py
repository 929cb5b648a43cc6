"""The reference fixtures' file format: a tree of dicts whose leaves are tensors or JSON values,
as one safetensors file that is read without pickle.

The tree is JSON in the file's metadata, each tensor there a ``{"__tensor__": name}`` that names
it among the file's tensors (its path in the tree, as a JSON list). Key order is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

TENSOR = "__tensor__"


def save_tree(tree: dict[str, Any], path: Path) -> None:
    tensors: dict[str, torch.Tensor] = {}

    def plain(value: Any, where: list[str]) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[name := json.dumps(where)] = value.contiguous()
            return {TENSOR: name}
        if isinstance(value, dict):
            if TENSOR in value or not all(isinstance(key, str) for key in value):
                raise ValueError(f"{where}: keys are strings other than {TENSOR!r}")
            return {key: plain(item, [*where, key]) for key, item in value.items()}
        return value

    save_file(tensors, str(path), metadata={"tree": json.dumps(plain(tree, []))})


def load_tree(path: Path) -> dict[str, Any]:
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as file:
        return json.loads(file.metadata()["tree"], object_hook=lambda d: tensors[d[TENSOR]] if TENSOR in d else d)

"""verl's checkpoint shards read without unpickling code.

verl 0.9.1 reads shards with ``torch.load(weights_only=False)``: its FSDP checkpoint manager on
resume (model, optimizer, extra state) and its FSDP model merger in ``trinity convert``; a crafted
file would run its code when read. While trinity has verl read a checkpoint
(``weights_only_loads``), those two modules' ``torch.load`` is ``load_plain_state``
(``weights_only``, allowing what verl's shards hold): a file holding anything else is refused
(``CheckpointRefused``, naming it) and runs nothing. No file of verl, and no other module's
``torch.load``, is changed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trinity.plugin_api import load_plain_state

VERL_LOADERS = ("verl.utils.checkpoint.fsdp_checkpoint_manager", "verl.model_merger.fsdp_model_merger")
"""The modules of verl that ``torch.load`` checkpoint shards (as ``torch.load``, through their
module attribute ``torch``)."""


def numpy_array_globals() -> list[Any]:
    """What verl's shards hold beyond torch's allowlist: tensors and FSDP's DTensors (on it once
    ``torch.distributed.tensor`` is imported), containers, numbers and strings are; the extra
    state's numpy RNG state (a ``uint32`` array) needs numpy's array reconstruction (under numpy
    2's name and numpy 1's, as a file written under either names it), ``ndarray``, ``dtype`` and
    the ``uint32`` dtype's class. They build an empty array and fill it with values unpickled
    under the same rules: nothing a file names is called."""
    import numpy as np

    reconstruct = np.ndarray.__reduce__(np.zeros(0))[0]  # numpy._core.multiarray._reconstruct (numpy 2)
    return [
        (reconstruct, "numpy._core.multiarray._reconstruct"),
        (reconstruct, "numpy.core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
        type(np.dtype(np.uint32)),
    ]


def load_shard(f: Any, map_location: Any = None, *, weights_only: bool | None = None) -> Any:
    """verl's ``torch.load`` call, with ``weights_only`` whatever verl asks."""
    return load_plain_state(f, map_location=map_location, allowed=numpy_array_globals())


class _WeightsOnlyTorch:
    """``torch`` as a verl checkpoint module sees it during ``weights_only_loads``: the module,
    with ``load`` replaced by ``load_shard``."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    load = staticmethod(load_shard)


@contextmanager
def weights_only_loads() -> Iterator[None]:
    """While verl reads checkpoint shards in this process: its checkpoint modules load them
    ``weights_only`` (``load_shard``)."""
    import torch
    import torch.distributed.tensor  # noqa: F401 - puts DTensor and its specs on torch's allowlist

    modules = [importlib.import_module(name) for name in VERL_LOADERS]
    for module in modules:
        if module.torch is not torch:  # another verl: find its shard loads again
            raise RuntimeError(f"{module.__name__}.torch is not the torch module: trinity cannot make it load safely")
    for module in modules:
        module.torch = _WeightsOnlyTorch(torch)
    try:
        yield
    finally:
        for module in modules:
            module.torch = torch

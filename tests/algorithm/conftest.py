"""A factory of small Batches for the algorithm-function tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from trinity.common.batch import Batch


def build_batch(mask: Any, rewards: Any = None, group_ids: Any = None, dtype=torch.float32, **fields: Any) -> Batch:
    """A Batch around ``mask`` ``[B, R]``; per-token/row fields given as nested lists or tensors."""
    mask = torch.as_tensor(mask, dtype=torch.float32)
    size, length = mask.shape
    tokens = torch.zeros(size, length + 2, dtype=torch.long)
    as_float = {k: (torch.as_tensor(v, dtype=dtype) if v is not None else None) for k, v in fields.items()}
    for name in ("is_expert", "run_ids", "step_ids", "state_ids", "global_steps", "model_versions"):
        if name in fields:
            as_float[name] = torch.as_tensor(fields[name])
    return Batch(
        input_ids=tokens,
        attention_mask=torch.ones_like(tokens),
        position_ids=torch.zeros_like(tokens),
        responses=tokens[:, 2:],
        response_mask=mask,
        rewards=torch.as_tensor(rewards if rewards is not None else [0.0] * size, dtype=dtype),
        group_ids=torch.as_tensor(group_ids if group_ids is not None else list(range(size))),
        model_versions=as_float.pop("model_versions", torch.zeros(size, dtype=torch.long)),
        **as_float,
    )


@pytest.fixture
def make_batch() -> Callable[..., Batch]:
    return build_batch

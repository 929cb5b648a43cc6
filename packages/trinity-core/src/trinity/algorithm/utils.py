"""Vectorised tensor helpers shared by the algorithm functions.

Conventions: masks are ``[B, R]`` with 1 on tokens that count; a row of zeros (an empty
response) contributes nothing and never yields NaN; statistics run in float32 or wider.
"""

from __future__ import annotations

from typing import get_args

from trinity.common.lazy_import import lazy_module
from trinity.config.schema import LossAggMode

torch = lazy_module("torch")

LOSS_AGG_MODES: tuple[str, ...] = get_args(get_args(LossAggMode)[0])  # the schema's, unwrapped from Annotated


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where the 0/1 ``mask`` is set; NaN/inf outside the mask are ignored."""
    kept = torch.where(mask.bool(), values, 0.0)
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over ``mask``; 0 where the mask is empty."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, epsilon: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` with mean and unbiased variance over the mask (verl's
    ``masked_whiten``); with fewer than two masked elements the variance is the biased one
    instead of an error. ``values`` must be finite: the sums are per-row dot products with the
    mask (fused, and as accurate as a pairwise sum), then summed over rows."""
    mask = mask.to(values.dtype)
    count = mask.sum()
    centred = values - torch.einsum("...r,...r->...", values, mask).sum() / count.clamp(min=1)
    kept = centred * mask
    return centred * torch.rsqrt(torch.einsum("...r,...r->...", kept, kept).sum() / (count - 1).clamp(min=1) + epsilon)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm: float | None = None) -> torch.Tensor:
    """Aggregate a ``[B, R]`` per-token loss to a scalar (verl's ``agg_loss``, one micro-batch).

    - ``token-mean``: sum(l * m) / sum(m)
    - ``token-sum``: sum(l * m) (no normalisation: the loss grows with the batch's tokens)
    - ``seq-mean-token-sum``: mean over non-empty rows of sum_t(l * m)
    - ``seq-mean-token-mean``: mean over non-empty rows of sum_t(l * m) / sum_t(m)
    - ``seq-mean-token-sum-norm``: sum(l * m) / n_rows / ``norm`` (default R, Dr. GRPO)

    Empty rows are left out of the sequence means; an all-empty batch gives 0.
    """
    token_sums = masked_sum(loss_mat, mask, dim=-1)
    lengths = mask.sum(-1)
    rows = (lengths > 0).to(loss_mat.dtype).sum().clamp(min=1)
    if mode == "token-mean":
        return token_sums.sum() / lengths.sum().clamp(min=1)
    if mode == "token-sum":
        return token_sums.sum()
    if mode == "seq-mean-token-sum":
        return token_sums.sum() / rows
    if mode == "seq-mean-token-mean":
        return (token_sums / lengths.clamp(min=1)).sum() / rows
    if mode == "seq-mean-token-sum-norm":
        return token_sums.sum() / rows / (norm if norm is not None else loss_mat.shape[-1])
    raise ValueError(f"unknown loss_agg_mode {mode!r}; choose one of {LOSS_AGG_MODES}")


def reverse_scan(coef: torch.Tensor | float, term: torch.Tensor) -> torch.Tensor:
    """Solve ``x_t = term_t + coef_t * x_{t+1}`` (``x_R = 0``) along the last dim.

    Log-depth doubling (Hillis-Steele) over affine maps: ``ceil(log2 R)`` vectorised steps,
    each composing every position with the one ``s`` ahead. Only products of the
    coefficients are formed (no division by powers), so discounts near 0 or sequences of
    thousands of tokens stay exact to rounding. A float ``coef`` is the same at every position.
    """
    x = term.clone()
    a = coef.clone() if isinstance(coef, torch.Tensor) else coef
    length, step = x.shape[-1], 1
    while step < length:  # each right-hand side is evaluated before the in-place write
        if isinstance(a, torch.Tensor):
            x[..., :-step] += a[..., :-step] * x[..., step:]
            if 2 * step < length:
                a[..., :-step] = a[..., :-step] * a[..., step:]
        else:
            x[..., :-step] += a * x[..., step:]
            a = a * a
        step *= 2
    return x


def masked_discounted_sum(term: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """``x_t = term_t + discount * x_{t'}`` on masked tokens, ``t'`` the next masked token after
    ``t`` (tokens off the mask are skipped and carry ``x`` through). One scan with a constant
    coefficient unless the mask has holes (multi-turn), then with per-token coefficients."""
    kept = mask * term
    if has_holes(mask):
        return reverse_scan(1 - mask + mask * discount, kept)
    return reverse_scan(discount, kept)


def has_holes(mask: torch.Tensor) -> bool:
    """Whether some row's mask turns back on after a 0 (not a plain prefix)."""
    return bool((mask[..., 1:] > mask[..., :-1]).any())


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index ``[B]`` in ``0..G-1`` and ``G`` for arbitrary integer ids."""
    unique, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(unique.numel())


def group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-group sum ``[G]`` of ``values [B]`` by ``index_add``."""
    return torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_stats(
    values: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor | None = None, unbiased: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group size, mean and std (unbiased unless told; 0 for groups of one), each
    ``[B]``. With 0/1 ``weights`` only the rows weighted 1 count (a group's kept rows)."""
    index, n_groups = group_index(group_ids)
    weights = torch.ones_like(values) if weights is None else weights.to(values.dtype)
    count = group_sum(weights, index, n_groups)
    mean = group_sum(values * weights, index, n_groups) / count.clamp(min=1)
    squares = group_sum(weights * (values - mean[index]) ** 2, index, n_groups)
    var = squares / (count - 1 if unbiased else count).clamp(min=1)
    return count[index], mean[index], var.sqrt()[index]


def group_max(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-group maximum ``[G]`` of ``values [B]`` (``-inf`` for a group without rows)."""
    empty = torch.full((n_groups,), -torch.inf, dtype=values.dtype, device=values.device)
    return empty.scatter_reduce(0, index, values, "amax")


def group_rank(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Rank ``[B]`` of each row by ascending ``values`` within its group (0 = smallest; ties
    in row order)."""
    index, n_groups = group_index(group_ids)
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(index[order], stable=True)]  # by group, then by value
    positions = torch.arange(order.numel(), device=values.device)
    sorted_groups = index[order]
    first = torch.full((n_groups,), order.numel(), device=values.device).scatter_reduce(
        0, sorted_groups, positions, "amin"
    )
    rank = torch.empty_like(order)
    rank[order] = positions - first[sorted_groups]
    return rank


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index ``[B]`` of the last masked token of each row (0 for an empty row)."""
    positions = torch.arange(1, mask.shape[-1] + 1, device=mask.device, dtype=torch.float32)
    return (mask.float() * positions).argmax(-1)

"""The functions run on a CUDA batch and agree with the CPU (skipped where torch sees no GPU)."""

from __future__ import annotations

import pytest
import torch

from trinity.plugins import Kind, get_registry, resolve

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_functions_on_cuda_match_cpu(make_batch):
    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(16, 24, generator=gen) > 0.2).float()
    old = -torch.rand(16, 24, generator=gen)
    batch = make_batch(
        mask, torch.randint(0, 2, (16,), generator=gen).float(), torch.arange(16) // 4,
        old_logprobs=old, ref_logprobs=old + 0.1, values=torch.randn(16, 24, generator=gen),
        advantages=torch.randn(16, 24, generator=gen), reward_baselines=torch.rand(16, generator=gen),
        is_expert=torch.arange(16) % 4 == 0, run_ids=torch.arange(16) // 2, step_ids=torch.arange(16) % 2,
        entropy_scores=torch.rand(16, 24, generator=gen), expected_entropy_scores=torch.rand(16, 24, generator=gen),
        teacher_logprobs=old - 0.2, global_steps=torch.full((16,), 3),
    )  # fmt: skip
    gpu = batch.to("cuda")
    for name in get_registry().names(Kind.ADVANTAGE_FN):
        fn = resolve(Kind.ADVANTAGE_FN, name)()
        torch.testing.assert_close(fn(gpu)[0].advantages.cpu(), fn(batch)[0].advantages, msg=name)
    logprobs = old + 0.05
    for name in get_registry().names(Kind.POLICY_LOSS_FN):
        fn = resolve(Kind.POLICY_LOSS_FN, name)()
        torch.testing.assert_close(fn(logprobs.cuda(), gpu)[0].cpu(), fn(logprobs, batch)[0], msg=name)

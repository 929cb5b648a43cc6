"""Our functions against Trinity-RFT 0.6.0's on the functions verl does not have.

The recorded fixture comes from ``reference/make_trinity_rft_reference.py`` (Trinity-RFT 0.6.0's
source in verl's venv): its losses, advantages and KL on the seeded batch of
``make_verl_reference.py`` and on a batch of multi-step runs. Our functions are resolved by
their registered names with the same args. Intentional differences, checked as such: a task
with a single run gets advantage 0 here (Trinity-RFT gives it its score),
``seq-mean-token-mean`` averages over non-empty rows (Trinity-RFT over all rows), and ``jsd``'s
advantage is the JSD's policy gradient (``test_distillation_advantages``).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch
from reference.tensor_tree import load_tree
from test_verl_reference import close

from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience
from trinity.plugins import Kind, resolve

REFERENCE_DIR = Path(__file__).with_name("reference")
_spec = importlib.util.spec_from_file_location(
    "make_trinity_rft_reference", REFERENCE_DIR / "make_trinity_rft_reference.py"
)
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)
PAYLOAD = load_tree(REFERENCE_DIR / "trinity_rft_reference.safetensors")
X, CASES = PAYLOAD["inputs"], PAYLOAD["cases"]
MASK = X["response_mask"]


def seeded_batch(make_batch) -> Batch:
    return make_batch(
        MASK, X["token_level_rewards"].sum(-1), X["group_ids"], old_logprobs=X["old_logprobs"],
        advantages=X["advantages"], ref_logprobs=X["ref_logprobs"], teacher_logprobs=X["ref_logprobs"],
        run_ids=torch.arange(len(MASK)),
    )  # fmt: skip


def test_recorded_inputs_are_the_seeded_batch():
    assert PAYLOAD["trinity_rft_version"] == "0.6.0"
    for key, value in ref.verl_ref.make_inputs().items():
        assert torch.equal(X[key], value), key


def test_policy_losses(make_batch):
    batch = seeded_batch(make_batch)
    rows = (MASK.sum(-1) > 0).sum()
    for case, (name, args) in ref.LOSSES.items():
        logprobs = X["logprobs"].float().requires_grad_(True)
        loss, metrics = resolve(Kind.POLICY_LOSS_FN, name)(**args)(logprobs, batch)
        loss.backward()
        scale = len(MASK) / rows if case in ref.SEQUENCE_MEAN else 1.0
        close(loss, CASES[case]["loss"] * scale)
        close(logprobs.grad, CASES[case]["grad"] * scale)
        assert all(type(v) is float for v in metrics.values()), case


def test_group_advantages(make_batch):
    batch = seeded_batch(make_batch)
    for case, (name, args) in ref.ADVANTAGES.items():
        out, _ = resolve(Kind.ADVANTAGE_FN, name)(**args)(batch)
        kept = CASES[case]["kept_rows"]
        assert torch.equal(out.run_ids, kept), case
        close(out.advantages, CASES[case]["advantages"][kept], MASK[kept])


def multi_step_batch() -> tuple[Batch, torch.Tensor]:
    """``make_multi_step``'s rows as experiences, collated as the trainer does; and the mask of
    the rows of tasks with a single run."""
    rows = ref.make_multi_step()
    experiences = []
    for row in rows:
        info = {"step_reward": row["step_reward"], "env_state_hash": row["state"]}
        experiences.append(
            Experience(
                tokens=torch.arange(1 + row["length"]),
                prompt_length=1,
                logprobs=torch.zeros(row["length"]),
                reward=row["reward"],
                eid=EID(batch="b", task=str(row["task"]), run=row["run"], step=row["step"]),
                info={k: v for k, v in info.items() if v is not None},
            )
        )
    runs = {(row["task"], row["run"]) for row in rows}
    lone = torch.tensor([sum(t == row["task"] for t, _ in runs) == 1 for row in rows])
    return Batch.from_experiences(experiences), lone


def test_multi_step_advantages():
    batch, lone = multi_step_batch()
    for case, (name, args) in ref.MULTI_STEP.items():
        out, _ = resolve(Kind.ADVANTAGE_FN, name)(**args)(batch)
        kept = CASES[case]["kept_rows"]
        expected = CASES[case]["advantages"] * ~lone[:, None]  # a task with one run: 0 here
        assert torch.equal(out.run_ids, batch.run_ids[kept]), case
        close(out.advantages, expected[kept], batch.response_mask[kept])


def test_entropy_clip_advantages(make_batch):
    """Clip_B / Clip_V: the tokens Trinity-RFT takes out of the loss, and the advantages of the rest."""
    extra = ref.entropy_inputs(X)
    batch = seeded_batch(make_batch).with_fields(
        entropy_scores=extra["scores"].float(), expected_entropy_scores=extra["necs"].float()
    )
    for case, (name, args) in ref.ENTROPY_CLIP.items():
        out, _ = resolve(Kind.ADVANTAGE_FN, name)(**args)(batch)
        kept = CASES[case]["response_mask"]
        assert torch.equal(out.response_mask, kept.float()), case
        close(out.advantages, CASES[case]["advantages"] * kept)


def test_distillation_advantages(make_batch):
    """on_policy_distill and jsd at beta 0 as recorded; jsd otherwise by its intended difference:
    Trinity-RFT's advantage lacks the teacher term ``kl_coef beta (t - log m)`` of the JSD's
    gradient (``JSDAdvantage``), and at beta 1 is ``kl_coef (s - t)`` for ``kl_coef (exp(t - s) - 1)``."""
    batch = seeded_batch(make_batch)
    for case, (name, args) in ref.DISTILL.items():
        out, _ = resolve(Kind.ADVANTAGE_FN, name)(**args)(batch)
        theirs = CASES[case]["advantages"]
        beta, coef, temperature = (
            args.get(k, d) for k, d in (("lambda_coef", 0.5), ("kl_coef", 1.0), ("temperature", 1.0))
        )
        if name == "jsd" and beta > 0:
            s, t = X["old_logprobs"].float() / temperature, X["ref_logprobs"].float() / temperature
            if beta == 1:
                close(theirs, coef * (s - t) * MASK, MASK)
                theirs = coef * torch.expm1(t - s)
            else:
                m = torch.logaddexp(s + math.log1p(-beta), t + math.log(beta))
                theirs = theirs + coef * beta * (t - m)
        close(out.advantages, theirs, MASK)


def test_kl(make_batch):
    batch = seeded_batch(make_batch)
    for name in ("k3", "corrected_k3"):
        logprobs = X["logprobs"].float().requires_grad_(True)
        kl = resolve(Kind.KL_FN, name)().per_token(logprobs, batch)
        kl.sum().backward()
        close(kl, CASES[f"kl_{name}"]["kl"], MASK)
        close(logprobs.grad, CASES[f"kl_{name}"]["grad"] * MASK)

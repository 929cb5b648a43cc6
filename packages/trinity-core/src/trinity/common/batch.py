"""The padded training batch every training engine and algorithm function works on.

Layout (the one verl uses): prompts left-padded to ``P`` tokens, responses right-padded
to ``R`` tokens; ``input_ids = [prompts | responses]`` of width ``P + R``. Every
per-token tensor the algorithm functions see (logprobs, advantages, masks, values) is
``[B, R]`` and aligned with ``responses``. DPO experiences expand into two rows each,
chosen at even and rejected at odd positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from trinity.common.experience import TOKEN_VERSIONS, Experience
from trinity.common.lazy_import import lazy_module

torch = lazy_module("torch")

_FROM_EXPERIENCE = ("old_logprobs", "advantages", "returns", "token_level_rewards", "teacher_logprobs")


@dataclass
class Batch:
    """Padded tensors for ``B`` samples; optional fields are filled along the pipeline."""

    input_ids: torch.Tensor  # [B, P + R] long
    attention_mask: torch.Tensor  # [B, P + R] long, 0 on padding
    position_ids: torch.Tensor  # [B, P + R] long
    responses: torch.Tensor  # [B, R] long
    response_mask: torch.Tensor  # [B, R] float, 1 on tokens that train
    rewards: torch.Tensor  # [B] float, sequence reward
    group_ids: torch.Tensor  # [B] long: samples of one task share an id (GRPO group)
    model_versions: torch.Tensor  # [B] long: rollout model version
    old_logprobs: torch.Tensor | None = None  # [B, R] rollout (or recomputed) logprobs
    ref_logprobs: torch.Tensor | None = None  # [B, R] reference model logprobs
    values: torch.Tensor | None = None  # [B, R] critic values
    advantages: torch.Tensor | None = None  # [B, R]
    returns: torch.Tensor | None = None  # [B, R]
    token_level_rewards: torch.Tensor | None = None  # [B, R]
    is_expert: torch.Tensor | None = None  # [B] bool: expert (SFT) data in a mix batch
    sample_weights: torch.Tensor | None = None  # [B] float: e.g. staleness down-weighting
    run_ids: torch.Tensor | None = None  # [B] long: one id per (task group, run) trajectory
    step_ids: torch.Tensor | None = None  # [B] long: turn of the row within its run
    reward_baselines: torch.Tensor | None = None  # [B] float: e.g. ReMax greedy reward
    teacher_logprobs: torch.Tensor | None = None  # [B, R] a teacher's logprobs of the response (distillation)
    step_rewards: torch.Tensor | None = None  # [B] float: info["step_reward"] of a step, NaN where absent
    state_ids: torch.Tensor | None = None  # [B] long: one id per info["env_state_hash"], -1 where absent
    global_steps: torch.Tensor | None = None  # [B] long: the (1-based) training step the row trains in
    m2po_mask: torch.Tensor | None = None  # [B, R] bool: the tokens M2PO keeps, chosen over the whole batch
    entropy_scores: torch.Tensor | None = None  # [B, R] the actor's p (H + log p) of each token (clipb/clipv)
    expected_entropy_scores: torch.Tensor | None = None  # [B, R] its expectation over the vocabulary
    rollout_logprobs: torch.Tensor | None = None  # [B, R] the rollout engine's, kept when old_logprobs are recomputed
    rollout_is_weights: torch.Tensor | None = None  # [B, R] rollout correction's importance weights (decoupled)
    multi_modal_inputs: list[dict[str, torch.Tensor] | None] | None = None  # [B] a row's image tensors, or None
    routed_experts: torch.Tensor | None = None  # [B, P + R, layers, top_k] int16 MoE routing, -1: none
    token_versions: torch.Tensor | None = None  # [B, R] long: the weights' version of each token (partial rollout)

    @property
    def batch_size(self) -> int:
        return int(self.responses.shape[0])

    @property
    def prompt_width(self) -> int:
        return int(self.input_ids.shape[1] - self.responses.shape[1])

    def __len__(self) -> int:
        return self.batch_size

    def select(self, index: torch.Tensor | slice | Sequence[int]) -> Batch:
        """Rows ``index`` of every tensor (a micro-batch, a filtered batch)."""
        if not isinstance(index, (slice, torch.Tensor)):
            index = torch.as_tensor(list(index), dtype=torch.long)
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        media = values.pop("multi_modal_inputs")
        if media is not None:
            rows = range(len(media))[index] if isinstance(index, slice) else torch.arange(len(media))[index].tolist()
            media = [media[i] for i in rows]
        return Batch(**{k: (v[index] if v is not None else None) for k, v in values.items()}, multi_modal_inputs=media)

    def to(self, device: torch.device | str) -> Batch:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        media = values.pop("multi_modal_inputs")
        if media is not None:
            media = [{k: v.to(device) for k, v in row.items()} if row else row for row in media]
        return Batch(
            **{k: (v.to(device) if v is not None else None) for k, v in values.items()}, multi_modal_inputs=media
        )

    def with_fields(self, **changes: torch.Tensor | None) -> Batch:
        return replace(self, **changes)

    @classmethod
    def from_experiences(cls, experiences: Sequence[Experience], pad_token_id: int = 0) -> Batch:
        """Collate experiences (DPO ones expand to chosen/rejected row pairs)."""
        if not experiences:
            raise ValueError("cannot build a batch from no experiences")
        rows = []
        for exp in experiences:
            if exp.chosen is not None or exp.rejected is not None:
                if exp.chosen is None or exp.rejected is None:
                    raise ValueError(f"DPO experience {exp.eid.uid} needs both chosen and rejected")
                prompt = exp.tokens[: exp.prompt_length]
                rows.append((exp, prompt, exp.chosen, 1.0))
                rows.append((exp, prompt, exp.rejected, 0.0))
            else:
                rows.append((exp, exp.prompt_tokens, exp.response_tokens, exp.reward))
        n = len(rows)
        prompt_width = max(int(p.numel()) for _, p, _, _ in rows)
        response_width = max(max(int(r.numel()) for _, _, r, _ in rows), 1)
        input_ids = torch.full((n, prompt_width + response_width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((n, prompt_width + response_width), dtype=torch.long)
        response_mask = torch.zeros((n, response_width), dtype=torch.float32)
        per_token: dict[str, torch.Tensor | None] = dict.fromkeys(_FROM_EXPERIENCE)
        group_index: dict[str, int] = {}
        run_index: dict[tuple[str, int], int] = {}
        group_ids = torch.empty(n, dtype=torch.long)
        run_ids = torch.empty(n, dtype=torch.long)
        step_ids = torch.empty(n, dtype=torch.long)
        baselines = [exp.info.get("reward_baseline") for exp, _, _, _ in rows]
        step_rewards = [exp.info.get("step_reward") for exp, _, _, _ in rows]
        state_index: dict[str, int] = {}
        states = [exp.info.get("env_state_hash") for exp, _, _, _ in rows]
        rewards = torch.zeros(n, dtype=torch.float32)
        versions = torch.empty(n, dtype=torch.long)
        for i, (exp, prompt, response, reward) in enumerate(rows):
            p, r = int(prompt.numel()), int(response.numel())
            input_ids[i, prompt_width - p : prompt_width] = prompt
            input_ids[i, prompt_width : prompt_width + r] = response
            attention_mask[i, prompt_width - p : prompt_width + r] = 1
            mask = exp.action_mask if exp.action_mask is not None and exp.chosen is None else None
            response_mask[i, :r] = mask[:r].float() if mask is not None else 1.0
            rewards[i] = float(reward) if reward is not None else 0.0
            group_ids[i] = group_index.setdefault(exp.eid.group, len(group_index))
            run_ids[i] = run_index.setdefault((exp.eid.group, exp.eid.run), len(run_index))
            step_ids[i] = exp.eid.step
            versions[i] = exp.model_version
            if exp.chosen is not None:
                continue
            for name, value in (
                ("old_logprobs", exp.logprobs),
                ("advantages", exp.advantages),
                ("returns", exp.returns),
                ("token_level_rewards", exp.token_level_reward),
                ("teacher_logprobs", exp.teacher_logprobs),
            ):
                if value is not None:
                    if per_token[name] is None:
                        per_token[name] = torch.zeros((n, response_width), dtype=torch.float32)
                    per_token[name][i, : min(r, value.numel())] = value[:r].float()
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        media = [exp.multi_modal_inputs for exp, _, _, _ in rows]
        token_versions = None
        if any(TOKEN_VERSIONS in exp.info for exp, _, _, _ in rows):  # partial rollout: else the row's version
            token_versions = versions[:, None].repeat(1, response_width)
            for i, (exp, _, response, _) in enumerate(rows):
                marked = exp.info.get(TOKEN_VERSIONS)
                if marked and exp.chosen is None:
                    length = min(int(response.numel()), len(marked))
                    token_versions[i, :length] = torch.tensor(marked[:length], dtype=torch.long)
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            responses=input_ids[:, prompt_width:].clone(),
            response_mask=response_mask,
            rewards=rewards,
            group_ids=group_ids,
            model_versions=versions,
            old_logprobs=per_token["old_logprobs"],
            teacher_logprobs=per_token["teacher_logprobs"],
            advantages=per_token["advantages"],
            returns=per_token["returns"],
            token_level_rewards=per_token["token_level_rewards"],
            run_ids=run_ids,
            step_ids=step_ids,
            reward_baselines=(
                torch.tensor([float(b) for b in baselines]) if all(b is not None for b in baselines) else None
            ),
            step_rewards=(
                torch.tensor([math.nan if r is None else float(r) for r in step_rewards])
                if any(r is not None for r in step_rewards)
                else None
            ),
            state_ids=(
                torch.tensor([-1 if h is None else state_index.setdefault(str(h), len(state_index)) for h in states])
                if any(h is not None for h in states)
                else None
            ),
            multi_modal_inputs=media if any(media) else None,
            routed_experts=_routed_experts(rows, prompt_width + response_width, prompt_width),
            token_versions=token_versions,
        )


def _routed_experts(
    rows: list[tuple[Experience, torch.Tensor, torch.Tensor, float]], width: int, prompt_width: int
) -> torch.Tensor | None:
    """``Batch.routed_experts`` of the rows (each experience's routing placed on its tokens' columns,
    -1 elsewhere); None when no experience has any."""
    routed = [exp.routed_experts if exp.chosen is None else None for exp, _, _, _ in rows]
    shapes = {tuple(r.shape[1:]) for r in routed if r is not None}
    if not shapes:
        return None
    if len(shapes) > 1:
        raise ValueError(f"experiences with MoE routing of different shapes (layers, top_k): {sorted(shapes)}")
    out = torch.full((len(rows), width, *shapes.pop()), -1, dtype=torch.int16)
    for i, ((_, prompt, _, _), value) in enumerate(zip(rows, routed, strict=True)):
        if value is not None:
            start = prompt_width - int(prompt.numel())
            out[i, start : start + value.shape[0]] = value[: width - start]
    return out

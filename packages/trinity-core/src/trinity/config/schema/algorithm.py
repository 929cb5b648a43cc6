"""The ``algorithm`` section: the RL algorithm, its functions, optimizer and rollout correction."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trinity.config.base import ConfigModel
from trinity.config.schema.values import LossAggMode, LRSchedulerType, Probability


class OptimizerConfig(ConfigModel):
    """The actor's optimizer and learning-rate schedule."""

    lr: float = Field(1e-6, gt=0.0, description="Peak learning rate.")
    lr_warmup_steps: int = Field(-1, ge=-1, description="Linear warm-up steps; -1: use lr_warmup_steps_ratio.")
    lr_warmup_steps_ratio: Probability = Field(0.0, description="Warm-up as a fraction of the total steps.")
    min_lr_ratio: Probability = Field(0.01, description="Final learning rate of the cosine schedule, relative to lr.")
    lr_scheduler_type: LRSchedulerType = Field("constant", description="constant or cosine (after warm-up).")
    optimizer_type: str = Field("adam", description="Optimizer: adam(w) (verl's AdamW).")
    betas: list[float] = Field(
        default_factory=lambda: [0.9, 0.999], min_length=2, max_length=2, description="Adam betas."
    )
    weight_decay: float = Field(0.01, ge=0.0, description="Decoupled weight decay.")
    clip_grad: float = Field(1.0, ge=0.0, description="Gradient-norm clipping; same as trainer.grad_clip.")
    total_training_steps: int = Field(-1, ge=-1, description="Steps of the schedule; -1: the run's total steps.")


ROLLOUT_RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)  # fmt: skip
"""verl 0.9's rejection-sampling criteria: ``token`` / ``seq_sum`` / ``seq_mean`` / ``seq_max`` of
the per-token ``k1 = -log r``, ``k2 = (log r)^2 / 2`` or ``k3 = r - 1 - log r``."""


def _rc(rollout_is: str | None, rollout_rs: str | None = None, rs: Any = None, **extra: Any) -> dict[str, Any]:
    values = {"rollout_is": rollout_is, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False}
    values.update(rollout_rs=rollout_rs, rollout_rs_threshold=rs, bypass_mode=False, loss_type="ppo_clip")
    return {**values, **extra}


_BYPASS_PG = {"bypass_mode": True, "loss_type": "reinforce"}
_GEO = ("seq_mean_k1", "0.999_1.001")
_K3 = ("seq_mean_k3", 0.01)
ROLLOUT_CORRECTION_PRESETS: dict[str, dict[str, Any]] = {
    "decoupled_token_is": _rc("token"),
    "decoupled_seq_is": _rc("sequence"),
    "decoupled_token_icepop": _rc("token", rollout_is_threshold="0.5_5.0"),
    "decoupled_seq_is_rs": _rc("sequence", "seq_sum_k1", "0.5_2.0"),
    "decoupled_geo_rs": _rc(None, *_GEO),
    "decoupled_geo_rs_seq_tis": _rc("sequence", *_GEO),
    "decoupled_geo_rs_token_tis": _rc("token", *_GEO),
    "decoupled_k3_rs": _rc(None, *_K3),
    "decoupled_k3_rs_seq_tis": _rc("sequence", *_K3),
    "decoupled_k3_rs_token_tis": _rc("token", *_K3),
    "bypass_ppo_clip": _rc(None, bypass_mode=True),
    "bypass_ppo_clip_geo_rs": _rc(None, *_GEO, bypass_mode=True),
    "bypass_ppo_clip_k3_rs": _rc(None, *_K3, bypass_mode=True),
    "bypass_pg_is": _rc("sequence", **_BYPASS_PG),
    "bypass_pg_token_icepop": _rc("token", rollout_is_threshold="0.5_5.0", **_BYPASS_PG),
    "bypass_pg_geo_rs": _rc(None, *_GEO, **_BYPASS_PG),
    "bypass_pg_geo_rs_seq_tis": _rc("sequence", *_GEO, **_BYPASS_PG),
    "bypass_pg_geo_rs_token_tis": _rc("token", *_GEO, **_BYPASS_PG),
    "disabled": _rc(None),
}
"""verl 0.9.1's ``RolloutCorrectionConfig`` factory methods with their default arguments
(``RolloutCorrectionConfig.<name>()``), as the keys they set."""
RolloutCorrectionPreset = Literal[tuple(ROLLOUT_CORRECTION_PRESETS)]  # type: ignore[valid-type]


def parse_is_threshold(spec: float | str) -> tuple[float, float | None]:
    """``rollout_is_threshold`` as ``(upper, lower)``: a number is TIS's upper bound (lower None),
    ``"lower_upper"`` IcePop's bounds (verl's rules: positive, lower <= upper)."""
    if isinstance(spec, bool):
        raise ValueError("a number or 'lower_upper', not a boolean")
    text = str(spec).strip()
    try:
        lower, upper = (float(v) for v in text.split("_", 1)) if "_" in text else (None, float(text))
    except ValueError:
        raise ValueError(f"{spec!r} is neither a number nor 'lower_upper' (e.g. 2.0 or '0.5_5.0')") from None
    if upper <= 0 or (lower is not None and lower <= 0):
        raise ValueError(f"the bounds of {spec!r} must be positive")
    if lower is not None and lower > upper:
        raise ValueError(f"the lower bound of {spec!r} is above the upper one")
    return upper, lower


def parse_rs_options(spec: str) -> list[str]:
    """``rollout_rs``: comma-separated criteria, duplicates dropped, each one of verl's."""
    options: list[str] = []
    for option in (part.strip() for part in spec.split(",")):
        if option and option not in options:
            if option not in ROLLOUT_RS_OPTIONS:
                raise ValueError(f"unknown criterion {option!r}; choose from {', '.join(ROLLOUT_RS_OPTIONS)}")
            options.append(option)
    if not options:
        raise ValueError("names no criterion")
    return options


def parse_rs_thresholds(options: list[str], spec: float | str) -> dict[str, tuple[float | None, float]]:
    """``rollout_rs_threshold`` per criterion as ``(lower, upper)``: one value for all or one per
    criterion (comma-separated); ``k1`` criteria take ratio bounds ``lower_upper`` (a single upper
    bound implies ``1 / upper`` below), the others one positive upper bound (verl's rules)."""
    specs = [str(spec)] if isinstance(spec, (int, float)) else [p.strip() for p in str(spec).split(",") if p.strip()]
    if len(specs) not in (1, len(options)):
        raise ValueError(f"give one threshold for all criteria or one per criterion ({len(options)})")
    specs = specs * len(options) if len(specs) == 1 else specs
    bounds: dict[str, tuple[float | None, float]] = {}
    for option, text in zip(options, specs, strict=True):
        try:
            if option.endswith("k1"):
                lower_text, upper_text = text.split("_", 1) if "_" in text else (None, text)
                upper = float(upper_text)
                lower = float(lower_text) if lower_text is not None else 1.0 / upper
            elif "_" in text:
                raise ValueError(f"{option} takes one upper bound, not {text!r}")
            else:
                lower, upper = None, float(text)
        except (ValueError, ZeroDivisionError) as exc:
            raise ValueError(f"bad threshold {text!r} for {option}: {exc}") from None
        if upper <= 0 or (lower is not None and lower <= 0):
            raise ValueError(f"the threshold {text!r} of {option} must be positive")
        if lower is not None and lower > upper:
            raise ValueError(f"the lower bound of {text!r} ({option}) is above the upper one")
        bounds[option] = (lower, upper)
    return bounds


class RolloutCorrectionConfig(ConfigModel):
    """verl 0.9's rollout correction (``algorithm.rollout_correction``, the keys of verl's
    ``RolloutCorrectionConfig``): importance weights and rejection sampling against the mismatch
    between the rollout engine's logprobs and the trainer's (precision, staleness)."""

    preset: RolloutCorrectionPreset | None = Field(
        None,
        description="One of verl's RolloutCorrectionConfig presets (decoupled_token_is, bypass_pg_is, ...); "
        "the keys set next to it win",
    )
    rollout_is: Literal["token", "sequence"] | None = Field(
        None, description="Importance weights per token or per sequence (their product); null: none (metrics only)"
    )
    rollout_is_threshold: float | str = Field(
        2.0, description="A number: truncate weights above it (TIS); 'lower_upper': zero weights outside (IcePop)"
    )
    rollout_is_batch_normalize: bool = Field(False, description="Scale the weights to mean 1 over the batch.")
    rollout_rs: str | None = Field(
        None, description="Rejection sampling: comma-separated criteria (token_k1, seq_mean_k3, ...); null: none"
    )
    rollout_rs_threshold: float | str | None = Field(
        None, description="Bound per criterion: k1 'lower_upper' ratio bounds, k2/k3 an upper bound"
    )
    bypass_mode: bool | None = Field(
        None,
        description="true: the rollout logprobs are the old ones (2 policies); false: recomputed (decoupled, "
        "3 policies); unset: algorithm.bypass_old_logprobs",
    )
    loss_type: Literal["ppo_clip", "reinforce"] = Field(
        "ppo_clip",
        description="Bypass mode's loss: ppo_clip (the policy loss, ratio to the rollout) or reinforce (-w A log p)",
    )

    @field_validator("rollout_is_threshold")
    @classmethod
    def _is_threshold(cls, value: float | str) -> float | str:
        parse_is_threshold(value)
        return value

    @field_validator("rollout_rs")
    @classmethod
    def _rs_options(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rs_options(value)
        return value

    @model_validator(mode="after")
    def _expand_preset(self) -> RolloutCorrectionConfig:
        """The preset's values for every key the file does not set."""
        if self.preset is not None:
            given = set(self.model_fields_set)
            for key, value in ROLLOUT_CORRECTION_PRESETS[self.preset].items():
                if key not in given:
                    setattr(self, key, value)
        return self


class AlgorithmConfig(ConfigModel):
    """The RL algorithm; unset functions and args come from ``algorithm_type``'s preset."""

    algorithm_type: str = Field("ppo", description="An algorithm type plugin: ppo, grpo, dpo, sft, ...")
    repeat_times: int = Field(1, ge=1, description="Rollouts per task (the group size of GRPO-like algorithms).")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and schedule.")
    sample_strategy: str | None = Field(None, description="How the trainer turns buffer reads into a batch.")
    sample_strategy_args: dict[str, Any] | None = Field(None, description="Arguments of the sample strategy.")
    advantage_fn: str | None = Field(None, description="Advantage function; unset: the algorithm's.")
    advantage_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the advantage function.")
    kl_penalty_fn: str | None = Field(None, description="KL subtracted from rewards; none disables it.")
    kl_penalty_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the KL penalty.")
    kl_loss_fn: str | None = Field(None, description="KL added to the loss; none disables it.")
    kl_loss_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the KL loss.")
    policy_loss_fn: str | None = Field(None, description="Policy loss; unset: the algorithm's.")
    policy_loss_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the policy loss.")
    entropy_loss_fn: str | None = Field(None, description="Entropy term of the loss; none disables it.")
    entropy_loss_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the entropy loss.")
    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are averaged.")
    enable_router_replay: bool = Field(
        False,
        description="Replay the rollout's MoE routing in training (R3): the rollout engine records each token's "
        "experts, the trainer's forward uses them. Engines: transformers rollout, torch trainer (vLLM and verl "
        "refused: docs/algorithms.md).",
    )
    bypass_old_logprobs: bool = Field(
        True,
        description="true: the rollout engine's logprobs are the old policy's (no recomputation); false: the "
        "trainer recomputes them with the actor (rollout_correction's decoupled mode)",
    )
    rollout_correction: RolloutCorrectionConfig | None = Field(
        None,
        description="verl 0.9's rollout correction of the rollout/trainer logprob mismatch (importance weights, "
        "rejection sampling); unset: none",
    )

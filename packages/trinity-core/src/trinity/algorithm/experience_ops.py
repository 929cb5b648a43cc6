"""Experience operators: what the explorer does to a step's experiences before writing them.

``data_processor.experience_pipeline.operators`` lists them by name, with ``args``; they run in
order. Each reports what it dropped or changed as metrics. DAPO's experience-side steps (Yu et al. 2025, arXiv:2503.14476) are here: dynamic
sampling (``dapo_dynamic_sampling``: drop the task groups whose samples are all right or all
wrong, and sample more tasks until the step has its batch again) and overlong reward shaping
(``overlong_reward_shaping``; ``mask_response_truncated`` is the paper's overlong filtering).
``pass_rate_calculator`` scores each task's runs, which the explorer feeds back to the task
selectors (curriculum); ``data_juicer`` runs a Data-Juicer recipe (``trinity.buffer.data_juicer``).
The names and arguments are Trinity-RFT's (``trinity/buffer/operators``).
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import statistics
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trinity.algorithm.base import ExperienceOperator, Metrics
from trinity.buffer.data_juicer import STATS_KEY, DataJuicerError, open_recipe, recipe
from trinity.common.errors import PicklableError
from trinity.common.experience import Experience
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs
from trinity.config.schema import Config, DataJuicerServiceConfig
from trinity.monitor.metrics import stats
from trinity.plugins import Kind, resolve

torch = lazy_module("torch")
logger = logging.getLogger(__name__)


def by_group(experiences: Sequence[Experience]) -> dict[str, list[Experience]]:
    """The experiences of each task group (``eid.group``), in order of first appearance."""
    groups: dict[str, list[Experience]] = {}
    for exp in experiences:
        groups.setdefault(exp.eid.group, []).append(exp)
    return groups


class _GroupFilter(ExperienceOperator):
    """Keeps the task groups ``keep`` accepts; the explorer may refill the dropped ones."""

    class Args(PluginArgs):
        max_refill_rounds: int = Field(
            0, ge=0, description="more task batches a step may run to refill dropped groups (0: none)"
        )

    @abstractmethod
    def keep(self, group: list[Experience], metrics: Metrics) -> bool:
        """Whether the group stays (counting why not in ``metrics``)."""

    @property
    def refill_rounds(self) -> int:
        return self.args.max_refill_rounds

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        metrics: Metrics = {}
        kept = [exp for group in by_group(experiences).values() if self.keep(group, metrics) for exp in group]
        return kept, {**metrics, "filtered_count": float(len(experiences) - len(kept))}


class DAPODynamicSampling(_GroupFilter):
    """DAPO's dynamic sampling (arXiv:2503.14476, Sec. 3.2; Trinity-RFT ``dapo_dynamic_sampling``):
    keep a task group only when some but not all of its samples are right, ``0 < #correct < G``
    (with 0/1 or +-1 accuracies: when its rewards vary), so that every group has a gradient. A
    sample is right when its ``metrics[metric_key]`` (else its reward) exceeds
    ``correct_threshold``; groups of one are dropped. The explorer then samples more tasks, up to
    ``max_refill_rounds`` batches, until the step has its ``batch_size`` groups again (verl's
    ``filter_groups`` with ``max_num_gen_batches``).
    """

    class Args(_GroupFilter.Args):
        metric_key: str = Field("accuracy", description="the metric that says a sample is right (else its reward)")
        correct_threshold: float = Field(0.0, description="a sample is right when its score exceeds this")
        max_refill_rounds: int = Field(10, ge=0, description="more task batches a step may run to refill (0: none)")

    def keep(self, group: list[Experience], metrics: Metrics) -> bool:
        key, threshold = self.args.metric_key, self.args.correct_threshold
        correct = sum(float(exp.metrics.get(key, exp.reward or 0.0)) > threshold for exp in group)
        if len(group) > 1 and 0 < correct < len(group):
            return True
        reason = "dropped_all_correct" if correct == len(group) else "dropped_all_wrong"
        metrics[reason] = metrics.get(reason, 0.0) + len(group)
        return False


class RewardSTDFilter(_GroupFilter):
    """Drop the task groups whose rewards' (population) std is at most ``threshold``, and groups
    of one (Trinity-RFT ``reward_std_filter``): with the default 0, the groups whose rewards are
    all equal, which carry no group-relative signal."""

    class Args(_GroupFilter.Args):
        threshold: float = Field(0.0, ge=0, description="a group's reward std must exceed this")

    def keep(self, group: list[Experience], metrics: Metrics) -> bool:
        rewards = [exp.reward or 0.0 for exp in group]
        return len(group) > 1 and statistics.pstdev(rewards) > self.args.threshold


class RewardFilter(ExperienceOperator):
    """Keep the experiences whose reward is at least ``threshold`` (Trinity-RFT ``reward_filter``;
    with ``raft``, the reward-ranked fine-tuning of Dong et al. 2023, arXiv:2304.06767)."""

    class Args(PluginArgs):
        threshold: float = Field(0.0, description="the lowest reward kept")

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        kept = [exp for exp in experiences if (exp.reward or 0.0) >= self.args.threshold]
        return kept, {"filtered_count": float(len(experiences) - len(kept))}


class InvalidRewardFilter(ExperienceOperator):
    """Drop the experiences without a usable reward: none, NaN or infinite (Trinity-RFT
    ``invalid_reward_filter``; it keeps infinities, which poison every advantage of the group)."""

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        kept = [exp for exp in experiences if exp.reward is not None and math.isfinite(exp.reward)]
        return kept, {"filtered_count": float(len(experiences) - len(kept))}


PASS_RATE = "pass_rate"
"""``Experience.info`` key of its task's pass rate in the step (``pass_rate_calculator``)."""


class PassRateCalculator(ExperienceOperator):
    """Each task's pass rate: the mean reward of its runs in the step (Trinity-RFT
    ``pass_rate_calculator``), kept in every experience's ``info["pass_rate"]``; the explorer
    feeds these back to the taskset's selector (``difficulty_based``, ``offline_easy2hard``).
    Metrics: ``pass_rate/mean`` and the shares of tasks whose rate is in (0, 1) (``valid_ratio``;
    ``strict_valid_ratio``: in (1/16, 15/16)), below 1, above 0, below 15/16 and above 1/16.
    Place it before the filters so that it scores the groups they drop too."""

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        rates = []
        for group in by_group(experiences).values():
            rate = statistics.fmean(exp.reward or 0.0 for exp in group)
            rates.append(rate)
            for exp in group:
                exp.info[PASS_RATE] = rate
        if not rates:
            return experiences, {}
        low, high = 1 / 16 + 1e-3, 15 / 16 - 1e-3
        shares = {
            "valid_ratio": lambda p: 0 < p < 1,
            "strict_valid_ratio": lambda p: low < p < high,
            "<1_ratio": lambda p: p < 1,
            ">0_ratio": lambda p: p > 0,
            "<15_16_ratio": lambda p: p < high,
            ">1_16_ratio": lambda p: p > low,
        }
        metrics = {name: sum(map(test, rates)) / len(rates) for name, test in shares.items()}
        return experiences, {**metrics, **stats("pass_rate", rates)}


class DataJuicer(ExperienceOperator):
    """Run a Data-Juicer recipe on the step's experiences (Trinity-RFT ``data_juicer``; needs
    ``trinity-core[data-juicer]``). Each experience goes in as a row with ``prompt_text``,
    ``response_text`` (also as ``text``, Data-Juicer's default text key) and ``reward``. The rows
    the recipe's filters drop are dropped; each statistic it computes goes into the experience's
    ``info`` under its name (``reward_shaping_mapper`` reads them). Tokens stay as generated, so a
    mapper that rewrites text changes nothing trained: those rows are counted (``rewritten_count``)
    and logged. Metrics: ``filtered_count`` and ``<statistic>/mean|min|max``."""

    class Args(PluginArgs):
        operators: list[dict[str, dict[str, Any] | None]] | None = Field(
            None, description="Data-Juicer operators in order, each {op_name: {args}}"
        )
        config_path: str | None = Field(None, description="a Data-Juicer recipe file; wins over operators")
        np: int = Field(4, ge=1, description="Data-Juicer worker processes")
        service_config: DataJuicerServiceConfig | None = Field(
            None, description="the Data-Juicer server to run it (filled from service.data_juicer); unset: in process"
        )

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        operators = [{name: op_args or {}} for op in self.args.operators or () for name, op_args in op.items()]
        config = recipe("args", operators, self.args.config_path, self.args.np)
        self.runner = open_recipe("args", config, self.args.service_config)

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        rows = [{_ROW: i, **_texts(exp), "reward": exp.reward} for i, exp in enumerate(experiences)]
        kept, values, rewritten = [], {}, 0
        for row in self.runner.run(rows):
            exp = experiences[row[_ROW]]
            rewritten += row.get("response_text") != _texts(exp)["response_text"]
            for name, value in (row.get(STATS_KEY) or {}).items():
                exp.info[name] = value
                if isinstance(value, (int, float)):
                    values.setdefault(name, []).append(value)
            kept.append(exp)
        if rewritten:
            logger.warning("data_juicer rewrote the text of %d experience(s): tokens are kept as generated", rewritten)
        metrics = {"filtered_count": float(len(experiences) - len(kept)), "rewritten_count": float(rewritten)}
        for name, column in values.items():
            metrics.update(stats(name, column))
        return kept, metrics

    def close(self) -> None:
        self.runner.close()


_ROW = "__trinity_row__"


def _texts(exp: Experience) -> dict[str, str]:
    """The prompt and response of an experience as text (from its messages and response text)."""
    messages = exp.messages or []
    if messages and messages[-1].get("role") == "assistant":
        *prompt, last = messages
        response = exp.info.get("response_text") or _content(last)
    else:
        prompt, response = messages, exp.info.get("response_text") or ""
    prompt_text = "\n".join(_content(m) for m in prompt)
    return {"prompt_text": prompt_text, "response_text": response, "text": response}


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # multimodal: the text parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class OverlongRewardShaping(ExperienceOperator):
    """DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13): with ``L_max =
    max_response_length`` and ``L_cache = cache_length``, a response of ``|y|`` tokens gets
    ``0`` up to ``L_max - L_cache``, ``(L_max - L_cache - |y|) / L_cache * penalty_factor`` in
    the cache window and ``-penalty_factor`` beyond ``L_max``, added to its reward (and kept as
    the metric ``overlong_penalty``). ``math_dapo_reward`` applies the same inside the reward
    function; this operator applies it to any workflow's rewards.
    """

    class Args(PluginArgs):
        max_response_length: int = Field(20480, gt=0, description="L_max, the longest response not punished fully")
        cache_length: int = Field(4096, ge=0, description="L_cache, the soft window before L_max")
        penalty_factor: float = Field(1.0, ge=0, description="the penalty at and beyond L_max")

        @model_validator(mode="after")
        def _window_fits(self) -> OverlongRewardShaping.Args:
            if self.cache_length >= self.max_response_length:
                raise ValueError("cache_length must be below max_response_length")
            return self

    def penalty(self, length: int) -> float:
        expected = self.args.max_response_length - self.args.cache_length
        if length <= expected:
            return 0.0
        if length > self.args.max_response_length:
            return -self.args.penalty_factor
        return (expected - length) / self.args.cache_length * self.args.penalty_factor

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        penalties = [self.penalty(exp.response_length) for exp in experiences]
        for exp, penalty in zip(experiences, penalties, strict=True):
            exp.reward = (exp.reward or 0.0) + penalty
            exp.metrics["overlong_penalty"] = penalty
        shaped = [p for p in penalties if p]
        return experiences, {"shaped_count": float(len(shaped)), "penalty_sum": sum(shaped)}


class RewardShaping(PluginArgs):
    """One rule of ``reward_shaping_mapper``."""

    stats_key: str = Field(description="the statistic of the experience (its info, else its metrics) to use")
    op_type: Literal["ADD", "SUB", "MUL", "DIV"] = Field("ADD", description="how the statistic meets the reward")
    weight: float = Field(1.0, description="the statistic's weight")

    @field_validator("op_type", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class RewardShapingMapper(ExperienceOperator):
    """Reshape rewards with statistics the experiences carry (Trinity-RFT ``reward_shaping_mapper``):
    each rule adds, subtracts, multiplies or divides the reward by ``weight x`` the experience's
    ``stats_key`` (from its ``info``, e.g. a Data-Juicer quality score, or its ``metrics``); an
    experience without the statistic, or without a reward, keeps its reward; a zero divisor
    leaves it too. Metrics: ``reward_diff/mean|min|max``."""

    class Args(PluginArgs):
        reward_shaping_configs: list[RewardShaping] = Field(default_factory=list, description="the rules, in order")

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        differences = []
        for exp in experiences:
            before = exp.reward
            if before is not None:
                for rule in self.args.reward_shaping_configs:
                    exp.reward = _shaped(exp.reward, _statistic(exp, rule.stats_key), rule)
            differences.append(0.0 if before is None else exp.reward - before)
        return experiences, stats("reward_diff", differences) or {
            f"reward_diff/{k}": 0.0 for k in ("mean", "min", "max")
        }


def _statistic(exp: Experience, key: str) -> float | None:
    value = exp.info.get(key, exp.metrics.get(key))
    return None if value is None else float(value)


def _shaped(reward: float, value: float | None, rule: RewardShaping) -> float:
    if value is None:
        return reward
    term = rule.weight * value
    if rule.op_type == "ADD":
        return reward + term
    if rule.op_type == "SUB":
        return reward - term
    if rule.op_type == "MUL":
        return reward * term
    return reward / term if term else reward


class MaskResponseTruncated(ExperienceOperator):
    """DAPO's overlong filtering (arXiv:2503.14476, Sec. 3.4; Trinity-RFT
    ``mask_response_truncated``): a response cut at the length limit trains no token (its
    action mask becomes 0), so truncation noise does not reach the gradient. Trinity-RFT masks
    only experiences that already carry an action mask; here every truncated one."""

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        masked = 0
        for exp in experiences:
            if exp.truncate_status == "response_truncated":
                exp.action_mask = torch.zeros(exp.response_length, dtype=torch.bool)
                masked += 1
        return experiences, {"masked_truncated_count": float(masked)}


class OperatorStartError(PicklableError, RuntimeError):
    """An operator of the pipeline cannot start; the message names its config key."""


INPUT_FILE = "experience_pipeline_input.jsonl"
"""Where the pipeline keeps its input in the job folder (``save_input`` without ``input_save_path``)."""
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


class InputRecord:
    """The experiences as they entered the pipeline (``save_input``), appended as readable rows
    (``experience_to_dict``): a jsonl file, or a sqlite file (``.db``, ``.sqlite``) with one
    ``experiences(id, experience)`` row each. A record of what the operators saw, not a buffer."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, experiences: Sequence[Experience]) -> None:
        # imported here: serialization imports torch, which the driver (it imports this module) must not
        from trinity.buffer.serialization import experience_to_dict

        rows = [json.dumps(experience_to_dict(e)) for e in experiences]
        if self.path.suffix not in _SQLITE_SUFFIXES:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(row + "\n" for row in rows))
            return
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS experiences (id INTEGER PRIMARY KEY, experience TEXT NOT NULL)")
            db.executemany("INSERT INTO experiences (experience) VALUES (?)", [(row,) for row in rows])


class ExperiencePipeline:
    """The configured operators, in order; metrics come prefixed ``pipeline/<operator>/``. With
    ``record``, each batch is kept as it came in first (Trinity-RFT's ``save_input``)."""

    def __init__(self, operators: Sequence[tuple[str, ExperienceOperator]] = (), record: InputRecord | None = None):
        self.operators = list(operators)
        self.record = record

    @classmethod
    def from_config(cls, config: Config) -> ExperiencePipeline:
        pipeline = config.data_processor.experience_pipeline
        if pipeline is None:
            return cls()
        operators = []
        for i, op in enumerate(pipeline.operators):
            key = f"data_processor.experience_pipeline.operators[{i}]"
            operator_cls = resolve(Kind.EXPERIENCE_OPERATOR, op.name, f"{key}.name")
            try:
                operators.append((op.name, operator_cls(**op.args)))
            except (DataJuicerError, ValueError) as exc:  # a recipe that cannot load, args the check missed
                raise OperatorStartError(f"{key} ({op.name}): {exc}") from exc
        record = None
        if operators and pipeline.save_input:  # without operators the input is what the buffer gets
            record = InputRecord(pipeline.input_save_path or Path(config.checkpoint_job_dir) / INPUT_FILE)
        return cls(operators, record)

    @property
    def refill_rounds(self) -> int:
        """The most task batches a step may add to make up for dropped groups."""
        return max((op.refill_rounds for _, op in self.operators), default=0)

    def close(self) -> None:
        """Release what operators hold (a Data-Juicer server they started)."""
        for _, op in self.operators:
            op.close()

    def __call__(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        if self.record is not None and experiences:
            self.record.append(experiences)
        metrics: Metrics = {}
        for name, op in self.operators:
            experiences, op_metrics = op.process(experiences)
            metrics.update({f"pipeline/{name}/{k}": v for k, v in op_metrics.items()})
        return experiences, metrics

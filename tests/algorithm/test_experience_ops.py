"""Experience operators (DAPO's dynamic sampling and overlong shaping, the reward filters) by hand."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from trinity.algorithm.experience_ops import (
    DAPODynamicSampling,
    DataJuicer,
    ExperiencePipeline,
    InvalidRewardFilter,
    MaskResponseTruncated,
    OperatorStartError,
    OverlongRewardShaping,
    PassRateCalculator,
    RewardFilter,
    RewardShapingMapper,
    RewardSTDFilter,
)
from trinity.buffer.data_juicer import DataJuicerError
from trinity.common.experience import EID, Experience
from trinity.config.schema import Config, ExperiencePipelineConfig, OperatorConfig


def experience(task: str, reward: float, response: int = 3, accuracy: float | None = None, **fields) -> Experience:
    metrics = {} if accuracy is None else {"accuracy": accuracy}
    return Experience(
        tokens=torch.arange(2 + response), prompt_length=2, reward=reward, eid=EID(batch="1", task=task),
        metrics=metrics, **fields,
    )  # fmt: skip


def groups() -> list[Experience]:
    """Task a: right and wrong; b: all right; c: all wrong; d: alone; e: rewards 1, 1 but accuracies 1, 0."""
    return [
        experience("a", 1.0), experience("a", 0.0), experience("b", 1.0), experience("b", 1.0),
        experience("c", -1.0), experience("c", -1.0), experience("d", 1.0),
        experience("e", 1.0, accuracy=1.0), experience("e", 1.0, accuracy=0.0),
    ]  # fmt: skip


def test_dapo_dynamic_sampling_keeps_groups_with_some_right_and_some_wrong():
    kept, metrics = DAPODynamicSampling().process(groups())
    assert [exp.eid.task for exp in kept] == ["a", "a", "e", "e"]  # e by its accuracy metric
    assert metrics == {"dropped_all_correct": 3.0, "dropped_all_wrong": 2.0, "filtered_count": 5.0}
    kept, _ = DAPODynamicSampling(correct_threshold=1.0, metric_key="none").process(groups())
    assert kept == []  # nothing exceeds 1: every group all wrong
    assert DAPODynamicSampling().refill_rounds == 10 and DAPODynamicSampling(max_refill_rounds=0).refill_rounds == 0


def test_reward_std_filter_drops_flat_groups_and_groups_of_one():
    kept, metrics = RewardSTDFilter().process(groups())
    assert [exp.eid.task for exp in kept] == ["a", "a"] and metrics["filtered_count"] == 7.0
    assert RewardSTDFilter().refill_rounds == 0
    kept, _ = RewardSTDFilter(threshold=0.5).process(groups())  # a's std is exactly 0.5
    assert kept == []


def test_reward_filter_keeps_rewards_from_the_threshold():
    kept, metrics = RewardFilter(threshold=1.0).process(groups())
    assert [exp.reward for exp in kept] == [1.0] * 6 and metrics["filtered_count"] == 3.0


@pytest.mark.parametrize("length, expected", [(5, 0.0), (6, 0.0), (7, -0.5), (9, -1.5), (10, -2.0), (11, -2.0)])
def test_overlong_shaping_by_hand(length, expected):
    # L_max 10, L_cache 4, factor 2: no penalty up to 6 tokens, (6 - |y|) / 4 * 2 in the window
    # (7 -> -0.5, 10 -> -2), -2 beyond 10
    fn = OverlongRewardShaping(max_response_length=10, cache_length=4, penalty_factor=2.0)
    (exp,), metrics = fn.process([experience("a", 1.0, response=length)])
    assert exp.reward == pytest.approx(1.0 + expected) and exp.metrics["overlong_penalty"] == pytest.approx(expected)
    assert metrics["shaped_count"] == float(expected != 0)
    with pytest.raises(ValidationError, match="cache_length"):
        OverlongRewardShaping(max_response_length=4, cache_length=4)


def test_mask_response_truncated():
    truncated = experience("a", 1.0, truncate_status="response_truncated")
    kept = experience("a", 1.0, action_mask=torch.ones(3, dtype=torch.bool))
    out, metrics = MaskResponseTruncated().process([truncated, kept])
    assert out[0].action_mask.tolist() == [False] * 3 and out[1].action_mask.all()
    assert metrics == {"masked_truncated_count": 1.0}


def test_pipeline_runs_in_order_and_prefixes_metrics():
    pipeline = ExperiencePipeline(
        [("shape", OverlongRewardShaping(max_response_length=4, cache_length=1)), ("keep", RewardFilter())]
    )
    long = experience("a", 0.5, response=9)  # beyond L_max: 0.5 - 1 < 0, then filtered
    kept, metrics = pipeline([long, experience("a", 0.5)])
    assert len(kept) == 1 and metrics == {
        "pipeline/shape/shaped_count": 1.0, "pipeline/shape/penalty_sum": -1.0, "pipeline/keep/filtered_count": 1.0,
    }  # fmt: skip
    assert pipeline.refill_rounds == 0 and ExperiencePipeline().refill_rounds == 0


def test_reward_shaping_mapper_applies_its_rules_in_order():
    """Trinity-RFT's rule: reward (op) weight x stats; a missing statistic or reward is left alone."""
    rules = [
        {"stats_key": "llm_quality_score", "op_type": "add", "weight": 0.5},
        {"stats_key": "length_factor", "op_type": "MUL", "weight": 2.0},
        {"stats_key": "zero", "op_type": "DIV", "weight": 1.0},
    ]
    mapper = RewardShapingMapper(reward_shaping_configs=rules)
    scored = experience("a", 1.0, info={"llm_quality_score": 0.4, "length_factor": 1.5, "zero": 0.0})
    partial = experience("b", 2.0)
    partial.metrics["llm_quality_score"] = 1.0  # a metric serves as well as info
    unscored = experience("c", 3.0)
    no_reward = experience("d", 0.0)
    no_reward.reward = None
    out, metrics = mapper.process([scored, partial, unscored, no_reward])
    assert [e.reward for e in out] == pytest.approx([(1.0 + 0.2) * 3.0, 2.5, 3.0, None])
    assert metrics["reward_diff/max"] == pytest.approx(2.6) and metrics["reward_diff/min"] == 0.0
    with pytest.raises(ValidationError, match="op_type"):
        RewardShapingMapper(reward_shaping_configs=[{"stats_key": "x", "op_type": "POW"}])


def test_invalid_reward_filter_drops_missing_nan_and_infinite_rewards():
    missing = experience("a", 0.0)
    missing.reward = None
    kept, metrics = InvalidRewardFilter().process(
        [
            experience("a", 1.0),
            missing,
            experience("a", float("nan")),
            experience("b", float("inf")),
            experience("b", 0.0),
        ]
    )
    assert [exp.reward for exp in kept] == [1.0, 0.0] and metrics == {"filtered_count": 3.0}


def test_pass_rate_calculator_scores_each_task_and_counts_the_shares():
    out, metrics = PassRateCalculator().process(groups())
    assert len(out) == 9  # it drops nothing
    assert {exp.eid.task: exp.info["pass_rate"] for exp in out} == {"a": 0.5, "b": 1.0, "c": -1.0, "d": 1.0, "e": 1.0}
    assert metrics["valid_ratio"] == 0.2 and metrics["strict_valid_ratio"] == 0.2  # a only
    assert metrics["<1_ratio"] == 0.4 and metrics[">0_ratio"] == 0.8  # a, c; a, b, d, e
    assert metrics["pass_rate/mean"] == pytest.approx(2.5 / 5) and metrics["pass_rate/min"] == -1.0
    assert PassRateCalculator().process([]) == ([], {})


def texts(*responses: str) -> list[Experience]:
    out = []
    for i, response in enumerate(responses):
        exp = experience(
            str(i), 1.0, messages=[{"role": "user", "content": "q?"}, {"role": "assistant", "content": ""}]
        )
        exp.info["response_text"] = response
        out.append(exp)
    return out


def test_data_juicer_filters_experiences_and_keeps_its_statistics():
    """A real Data-Juicer recipe: drop short responses, score alphanumeric ratios; the mapper
    then adds a statistic to the reward."""
    recipe = [{"text_length_filter": {"min_len": 10}}, {"alphanumeric_filter": {"min_ratio": 0.5}}]
    pipeline = ExperiencePipeline(
        [
            ("data_juicer", DataJuicer(operators=recipe, np=1)),
            ("shape", RewardShapingMapper(reward_shaping_configs=[{"stats_key": "alnum_ratio", "weight": 1.0}])),
        ]
    )
    kept, metrics = pipeline(texts("ok", "a perfectly fine answer", "!!!!!!!!!!!!!!!!!!!!", "forty two is it"))
    assert [exp.eid.task for exp in kept] == ["1", "3"]
    assert kept[0].info["text_len"] == 23 and 0.5 < kept[0].info["alnum_ratio"] < 1
    assert kept[0].reward == pytest.approx(1.0 + kept[0].info["alnum_ratio"])
    assert metrics["pipeline/data_juicer/filtered_count"] == 2.0
    assert metrics["pipeline/data_juicer/rewritten_count"] == 0.0
    assert metrics["pipeline/data_juicer/text_len/min"] == 15.0


def test_data_juicer_errors_name_the_operator_and_what_is_wrong(tmp_path):
    with pytest.raises(DataJuicerError, match="args: a Data-Juicer recipe needs operators or config_path"):
        DataJuicer()
    config = Config()
    config.data_processor.experience_pipeline = ExperiencePipelineConfig(
        operators=[OperatorConfig(name="data_juicer", args={"config_path": str(tmp_path / "none.yaml")})]
    )
    with pytest.raises(OperatorStartError, match=r"operators\[0\] \(data_juicer\): args.config_path: no Data-Juicer"):
        ExperiencePipeline.from_config(config)
    config.data_processor.experience_pipeline.operators[0].args = {"operators": [{"no_such_op": {}}]}
    with pytest.raises(OperatorStartError, match="no_such_op"):
        ExperiencePipeline.from_config(config)


def test_data_juicer_missing_says_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "data_juicer" else real(name, *a))
    with pytest.raises(
        DataJuicerError, match=r"args: Data-Juicer is not installed: pip install \"trinity-core\[data-juicer\]\""
    ):
        DataJuicer(operators=[{"text_length_filter": {}}])


@pytest.mark.parametrize("file", [None, "kept/input.jsonl", "kept/input.db"], ids=["default", "jsonl", "sqlite"])
def test_save_input_keeps_each_batch_as_it_entered_the_operators(tmp_path, file):
    """Trinity-RFT's save_input / input_save_path: the filtered-out experiences are in the record too."""
    import json
    import sqlite3

    from trinity.algorithm.experience_ops import INPUT_FILE
    from trinity.buffer.serialization import experience_from_dict

    config = Config()
    config.checkpoint_job_dir = str(tmp_path / "job")
    path = str(tmp_path / file) if file else None
    config.data_processor.experience_pipeline = ExperiencePipelineConfig(
        operators=[OperatorConfig(name="reward_filter", args={"threshold": 1.0})], input_save_path=path
    )
    pipeline = ExperiencePipeline.from_config(config)
    batches = [groups(), groups()[:2]]
    kept = [pipeline(batch)[0] for batch in batches]
    assert [len(k) for k in kept] == [6, 1]
    if file and file.endswith(".db"):
        with sqlite3.connect(path) as db:
            rows = [row for (row,) in db.execute("SELECT experience FROM experiences ORDER BY id")]
    else:
        rows = (tmp_path / (file or f"job/{INPUT_FILE}")).read_text().splitlines()
    record = [experience_from_dict(json.loads(row)) for row in rows]
    assert [(e.eid.task, e.reward) for e in record] == [(e.eid.task, e.reward) for batch in batches for e in batch]
    assert torch.equal(record[0].tokens, batches[0][0].tokens)


def test_save_input_false_or_no_operators_keeps_nothing(tmp_path):
    config = Config()
    config.checkpoint_job_dir = str(tmp_path)
    config.data_processor.experience_pipeline = ExperiencePipelineConfig(
        operators=[OperatorConfig(name="reward_filter")], save_input=False
    )
    assert ExperiencePipeline.from_config(config).record is None
    config.data_processor.experience_pipeline = ExperiencePipelineConfig()
    assert ExperiencePipeline.from_config(config).record is None
    assert list(tmp_path.iterdir()) == []

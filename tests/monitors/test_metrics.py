import time

import pytest

from trinity.monitor.metrics import eval_at_k, gather, stats, timer


def test_stats_names_mean_max_min():
    assert stats("critic/score", [1, 0, 0.5]) == {
        "critic/score/mean": 0.5,
        "critic/score/max": 1.0,
        "critic/score/min": 0.0,
    }
    assert stats("response_length", []) == {}


def test_gather_summarises_each_rollout_metric_over_the_experiences_that_have_it():
    metrics = gather("rollout", [{"accuracy": 1, "format": 0.5}, {"accuracy": 0}])
    assert metrics == {
        "rollout/accuracy/mean": 0.5,
        "rollout/accuracy/max": 1.0,
        "rollout/accuracy/min": 0.0,
        "rollout/format/mean": 0.5,
        "rollout/format/max": 0.5,
        "rollout/format/min": 0.5,
    }


def test_eval_at_k_averages_each_tasks_mean_and_best_run():
    tasks = [
        [{"accuracy": 1}, {"accuracy": 0}, {"accuracy": 0}, {"accuracy": 1}],
        [{"accuracy": 0}, {"accuracy": 0}, {"accuracy": 0}, {"accuracy": 0}],
    ]
    assert eval_at_k("gsm8k", tasks) == {"eval/gsm8k/accuracy/mean@4": 0.25, "eval/gsm8k/accuracy/best@4": 0.5}
    assert eval_at_k("gsm8k", []) == {}


def test_eval_at_k_detailed_stats_add_each_tasks_spread_and_worst_run_and_the_spread_over_tasks():
    tasks = [[{"accuracy": 1}, {"accuracy": 0}], [{"accuracy": 1}, {"accuracy": 1}], [{"accuracy": 0}, {"accuracy": 0}]]
    assert eval_at_k("gsm8k", tasks, detailed=True) == pytest.approx(
        {
            "eval/gsm8k/accuracy/mean@2": 0.5,
            "eval/gsm8k/accuracy/best@2": 2 / 3,
            "eval/gsm8k/accuracy/std@2": 0.5 / 3,  # task 1's runs differ by 1: std 0.5
            "eval/gsm8k/accuracy/worst@2": 1 / 3,
            "eval/gsm8k/accuracy/mean@2/std": (1 / 6) ** 0.5,  # task means 0.5, 1, 0
            "eval/gsm8k/accuracy/mean@2/max": 1.0,
            "eval/gsm8k/accuracy/mean@2/min": 0.0,
        }
    )
    assert set(eval_at_k("gsm8k", tasks)) == {"eval/gsm8k/accuracy/mean@2", "eval/gsm8k/accuracy/best@2"}


def test_timer_records_seconds_even_when_the_block_raises():
    metrics: dict[str, float] = {}
    with pytest.raises(ValueError), timer(metrics, "step"):
        time.sleep(0.01)
        raise ValueError
    assert 0.01 <= metrics["time/step"] < 1

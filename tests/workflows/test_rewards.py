"""Table tests of the catalogue's reward functions, with the cases that trip string matching."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity.plugins import Kind, resolve
from trinity_workflows.answers import _parse, final_answer, is_equivalent, last_boxed, verified
from trinity_workflows.rewards import (
    accuracy_reward,
    countdown_reward,
    format_reward,
    math_boxed_reward,
    math_dapo_reward,
    math_reward,
)


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("7", "7", 1.0),
        ("7<|im_end|>", "7", 1.0),
        ("the answer is 7", "7", 1.0),
        ("3 + 4 = 7", 7, 1.0),  # an int truth, as JSON rows carry it
        ("3+4", "7", 0.0),  # restating the question "3+4=" is not an answer
        ("-3 - 4", "-7", 0.0),
        ("$2\\sqrt{2}$", "\\sqrt{8}", 1.0),  # a product that is an answer
        ("I first got 5 but actually 7", "7", 1.0),  # the last expression counts
        ("7.0", "7", 1.0),
        ("8", "7", 0.0),
        ("", "7", 0.0),
        ("<|im_end|>", "7", 0.0),
        ("}}{{ \\frac{ garbage", "7", 0.0),
        ("\\frac{1}{2}", "0.5", 1.0),
        ("0.5", "\\frac{1}{2}", 1.0),
        ("1/2", "$\\frac{1}{2}$", 1.0),
        ("5 cm", "5", 1.0),
        ("The length is $5\\,\\text{cm}$", "5", 1.0),
        ("<think>maybe 5</think><answer>7</answer>", "7", 1.0),
        ("<think>it is 7</think><answer>5</answer>", "7", 0.0),  # the tag wins over the reasoning
        ("\\boxed{3} then \\boxed{7}", "7", 1.0),  # the last box counts
        ("\\boxed{7} then \\boxed{3}", "7", 0.0),
        ("So 72 in total.", "Natalia sold 48 + 24 = 72 clips.\n#### 72", 1.0),  # GSM8K truth
    ],
)
def test_math_reward(response, truth, expected):
    assert math_reward(response, truth) == {"accuracy": expected}


def test_math_reward_format_weight_keeps_the_reward_in_unit_interval():
    good = math_reward("<think>3+4</think> <answer>7</answer>", "7", format_weight=0.2)
    assert good == pytest.approx({"accuracy": 0.8, "format": 0.2})
    assert sum(math_reward("7", "7", format_weight=0.2).values()) == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("so \\boxed{7}", "7", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{\\dfrac{1}{2}}", "\\frac12", 1.0),
        ("\\boxed{5 \\text{ cm}}", "5", 1.0),
        ("\\boxed{1} or maybe \\boxed{2}", "2", 1.0),  # the last box counts
        ("\\boxed{1} or maybe \\boxed{2}", "1", 0.0),
        ("\\fbox{7}", "7", 1.0),
        ("\\boxed 7.", "7", 1.0),
        ("the answer is 7", "7", 0.0),  # no box, no credit
        ("\\boxed{7", "7", 0.0),  # truncated before the box closed
        ("", "7", 0.0),
        ("\\boxed{}", "7", 0.0),
        ("\\boxed{3 \\times 4}", "12", 0.0),  # still a computation, not an answer
    ],
)
def test_math_boxed_reward(response, truth, expected):
    assert math_boxed_reward(response, truth) == {"accuracy": expected}


def test_math_boxed_reward_with_think_penalises_a_missing_think_block():
    assert math_boxed_reward("<think>4+3</think> \\boxed{7}", "7", with_think=True) == {"accuracy": 1.0, "format": 0.0}
    assert math_boxed_reward("\\boxed{7}", "7", with_think=True, format_penalty=0.5) == {
        "accuracy": 1.0,
        "format": -0.5,
    }


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>a</think><answer>b</answer>", 1.0),
        ("<think>a\nb</think>\n<answer>7</answer><|im_end|>", 1.0),
        ("<answer>7</answer>", 0.0),
        ("<think>a</think><answer>7</answer> and more", 0.0),
        ("", 0.0),
    ],
)
def test_format_reward(response, expected):
    assert format_reward(response) == {"format": expected}


def test_format_reward_takes_a_custom_pattern_and_score():
    assert format_reward("Answer: 7", pattern=r"Answer: \d+", score=0.5) == {"format": 0.5}


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("B", "b", 1.0),
        ("The answer is Paris.", "Paris", 0.0),  # text answers must be the final answer itself
        ("<answer> Paris. </answer>", "paris", 1.0),
        ("<answer>1/2</answer>", "0.5", 1.0),
        ("", "", 0.0),
        ("C", "B", 0.0),
    ],
)
def test_accuracy_reward(response, truth, expected):
    assert accuracy_reward(response, truth) == {"accuracy": expected}


COUNTDOWN = {"numbers": [3, 5, 7], "target": 22}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>...</think><answer>3 * 5 + 7</answer>", {"format": 0.1, "accuracy": 0.9}),
        ("<answer>(7 + 5) * 3 - 14</answer>", {"format": 0.1, "accuracy": 0.0}),  # 14 is not given
        ("<answer>3 * 5 + 7 = 22</answer>", {"format": 0.1, "accuracy": 0.9}),
        ("<answer>3 * 7 + 5</answer>", {"format": 0.1, "accuracy": 0.0}),  # 26
        ("<answer>3 * 5 + 7 + 7 - 7</answer>", {"format": 0.1, "accuracy": 0.0}),  # 7 used twice
        ("<answer>3 * 5</answer>", {"format": 0.1, "accuracy": 0.0}),  # 7 unused
        ("<answer>__import__('os')</answer>", {"format": 0.0, "accuracy": 0.0}),
        ("<answer>7 / (5 - 5)</answer>", {"format": 0.0, "accuracy": 0.0}),
        ("<answer>3 ** 5</answer>", {"format": 0.0, "accuracy": 0.0}),
        ("no equation here", {"format": 0.0, "accuracy": 0.0}),
        ("", {"format": 0.0, "accuracy": 0.0}),
        ("First try\n3 * 5 + 7", {"format": 0.1, "accuracy": 0.9}),  # the last line, untagged
    ],
)
def test_countdown_reward(response, expected):
    assert countdown_reward(response, COUNTDOWN) == pytest.approx(expected)


def test_countdown_reward_reads_json_truth_and_fractions():
    truth = json.dumps({"numbers": [1, 2, 6], "target": 3})
    assert countdown_reward("<answer>6 / 2 * 1</answer>", truth)["accuracy"] == pytest.approx(0.9)
    assert countdown_reward("<answer>6 / (2 * 1)</answer>", truth, format_score=0.0) == {"format": 0.0, "accuracy": 1.0}


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("\\boxed{7}", "7", 1.0),
        ("reasoning...\nAnswer: 7", "7", 1.0),
        ("Answer: 8", "7", -1.0),
        ("", "7", -1.0),
    ],
)
def test_math_dapo_reward(response, truth, expected):
    assert math_dapo_reward(response, truth) == {"accuracy": expected}


@pytest.mark.parametrize(("length", "penalty"), [(10, 0.0), (12, 0.0), (14, -0.25), (16, -0.5), (20, -0.5)])
def test_math_dapo_overlong_penalty(length, penalty):
    args = {"enable_overlong_penalty": True, "max_response_length": 16, "cache_length": 4, "penalty_factor": 0.5}
    assert math_dapo_reward("\\boxed{7}", "7", response_length=length, **args) == {"accuracy": 1.0, "overlong": penalty}


def test_math_dapo_overlong_penalty_needs_its_settings():
    with pytest.raises(ValueError, match="max_response_length"):
        math_dapo_reward("\\boxed{7}", "7", response_length=3, enable_overlong_penalty=True)


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("a \\boxed{1} b \\boxed{\\sqrt{2}} c", "\\sqrt{2}"),
        ("\\boxed{{a}{b}}", "{a}{b}"),
        ("no box", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_last_boxed(text, boxed):
    assert last_boxed(text) == boxed


def test_final_answer_prefers_tag_then_box_then_text():
    assert final_answer("<think>\\boxed{1}</think> \\boxed{2} <answer>3</answer>") == "3"
    assert final_answer("<think><answer>1</answer></think> \\boxed{2}") == "2"  # thinking is ignored
    assert final_answer("just 4<|im_end|>") == "just 4"


def test_rewards_work_off_the_main_thread():
    """Workflows run in threads; math-verify's signal-based timeout must not be in the way."""
    results: list[dict[str, float]] = []
    thread = threading.Thread(target=lambda: results.append(math_reward("\\frac{1}{2}", "0.5")))
    thread.start()
    thread.join()
    assert results == [{"accuracy": 1.0}]


def test_a_task_s_truth_and_a_repeated_answer_are_parsed_once():
    """GRPO scores n samples against one truth; a trained model repeats its answers."""
    _parse.cache_clear()
    scores = [math_reward(response, "7")["accuracy"] for response in ("7.0", "8.", "<answer>7.0</answer>", "8.", "7")]
    assert scores == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert _parse.cache_info().misses == 3  # "7" (the truth), "7.0", "8."; "7" against "7" parses nothing
    assert math_reward("7.0", "7") == {"accuracy": 1.0}  # a cached parse still compares as before


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**12), 10**12), st.integers(-(10**12), 10**12), st.sampled_from(["", "0", "00"]), st.booleans())
def test_two_integers_compare_as_math_verify_compares_them(a, b, zeros, same):
    """The integer shortcut decides as math-verify does: equal and unequal values, leading
    zeros, signs (``-0`` too), the spaces around a response."""
    prediction = f"{'-' if a < 0 or (a == 0 and same) else ''}{zeros}{abs(a)}"
    truth = str(a if same else b)
    for response in (prediction, f" {prediction}\n"):
        assert is_equivalent(response, truth) == verified(response, truth), (response, truth)


@pytest.mark.parametrize(
    "name",
    ["math_reward", "math_boxed_reward", "format_reward", "countdown_reward", "accuracy_reward", "math_dapo_reward"],
)
def test_registered_names_resolve_to_the_functions(name):
    fn = resolve(Kind.REWARD_FN, name)
    assert fn.__name__ == name and fn.__module__ == "trinity_workflows.rewards"

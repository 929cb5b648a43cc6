"""rlcr_reward (rules, for real), rm_gallery_reward and trajectory_accuracy_grader_reward (their
libraries, RM-Gallery and OpenJudge, are stand-ins here: RM-Gallery pins transformers 4.57 and
numpy 2.2 against this environment, and OpenJudge grades with a hosted judge model; the stand-ins
speak the few calls the rewards make, so what is tested is what we send and how we read the result)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest

from trinity.config.check import plugin_args
from trinity.config.load import IssueCollector
from trinity.plugins import Kind, resolve
from trinity_workflows import rewards
from trinity_workflows.base import WorkflowError
from trinity_workflows.rewards import RLCR_WEIGHTS, rlcr_reward

UNWEIGHTED = dict.fromkeys(RLCR_WEIGHTS, 1.0)


def rlcr(answer="42", confidence="0.8", tail="", between=""):
    return (
        f"<think>so</think>{between}<answer>{answer}</answer><analysis>checked</analysis>"
        f"<confidence>{confidence}</confidence>{tail}"
    )


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (rlcr(), {"format": 1, "accuracy": 1, "brier": 1 - 0.2**2, "mean_confidence": 0.8}),
        (rlcr("41"), {"format": 1, "brier": 1 - 0.8**2, "mean_confidence": 0.8}),
        (
            rlcr(confidence="1"),
            {"format": 1, "accuracy": 1, "brier": 1, "mean_confidence": 1, "confidence_one_or_zero": 1},
        ),
        (rlcr(tail=" more"), {"mean_confidence": 0.8}),  # text after the last tag
        (rlcr(between="x"), {"mean_confidence": 0.8}),  # text between the tags
        (rlcr(confidence="1.5"), {}),  # not a probability
        ("<think><answer>42</answer></think>" + rlcr(), {"mean_confidence": 0.8}),  # nested tags
        ("<answer>42</answer><confidence>0.005</confidence>", {"mean_confidence": 0.005, "confidence_one_or_zero": 1}),
        ("the answer is 42", {}),
    ],
)
def test_rlcr_components(response, expected):
    scores = rlcr_reward(response, "42", weights=UNWEIGHTED)
    assert scores == pytest.approx({name: float(expected.get(name, 0.0)) for name in RLCR_WEIGHTS})


def test_rlcr_weights_scale_each_component_and_must_name_all_five():
    assert rlcr_reward(rlcr(), "42") == pytest.approx(
        {"format": 0.5, "accuracy": 0.5, "brier": 0.5 * 0.96, "mean_confidence": 0.8e-5, "confidence_one_or_zero": 0.0}
    )
    with pytest.raises(ValueError, match=r"missing: \['brier'.*unknown: \['calibration'\]"):
        rlcr_reward(rlcr(), "42", weights={"format": 1, "accuracy": 1, "calibration": 1})
    with pytest.raises(ValueError, match="weights.brier must be a finite number"):
        rlcr_reward(rlcr(), "42", weights={**UNWEIGHTED, "brier": float("inf")})


def test_math_workflow_scores_with_rlcr_and_its_weights(make_workflow):
    weights = {**UNWEIGHTED, "format": 2.0}
    workflow = make_workflow(
        "math_workflow",
        {"prompt": "6*7?", "response": "42"},
        reward_fn_type="rlcr_reward",
        reward_fn_args={"weights": weights},
    )
    (experience,) = workflow.run()
    assert set(experience.metrics) >= set(RLCR_WEIGHTS) and experience.reward == pytest.approx(
        sum(rlcr_reward(experience.info["response_text"], "42", weights=weights).values())
    )
    assert resolve(Kind.REWARD_FN, "rlcr_reward") is rlcr_reward


# --- OpenJudge's trajectory grader (stand-in library) --------------------------------------


@dataclass
class GraderScore:
    score: float


@dataclass
class Runner:
    grader_configs: dict
    max_concurrency: int
    show_progress: bool
    graded: list = field(default_factory=list)

    async def arun(self, data):
        """Scores a trajectory by its number of assistant turns (1 to 3): a stand-in judge."""
        self.graded.extend(data)
        turns = sum(m["role"] == "assistant" for m in data[0]["messages"])
        return {"trajectory": [GraderScore(min(3.0, float(turns)))]}


def install(monkeypatch, **modules):
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def openjudge(monkeypatch):
    runners: list[Runner] = []

    def runner(**settings):
        runners.append(Runner(**settings))
        return runners[-1]

    install(
        monkeypatch,
        **{
            "openjudge": {},
            "openjudge.graders.schema": {"GraderScore": GraderScore},
            "openjudge.graders.agent.trajectory.trajectory_accuracy": {
                "TrajectoryAccuracyGrader": lambda model: ("trajectory accuracy", model)
            },
            "openjudge.models.openai_chat_model": {"OpenAIChatModel": lambda **settings: settings},
            "openjudge.runner.grading_runner": {"GradingRunner": runner},
        },
    )
    monkeypatch.setenv("JUDGE_URL", "http://127.0.0.1:1/v1")
    yield runners
    rewards._trajectory_runner.cache_clear()


def test_the_trajectory_grader_sends_the_conversation_and_normalises_the_score(openjudge, make_workflow):
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "left"},
        {"role": "user", "content": "ok"},
    ]
    scores = rewards.trajectory_accuracy_grader_reward("right", messages=messages, judge_api_base_url_env="JUDGE_URL")
    assert scores == {"trajectory_accuracy": 0.5}  # (2 - 1) / (3 - 1)
    (runner,) = openjudge
    assert runner.graded[0]["messages"][-1] == {"role": "assistant", "content": "right"}
    _, judge = runner.grader_configs["trajectory"]
    assert (
        judge["base_url"] == "http://127.0.0.1:1/v1" and judge["model"] == "qwen3-max" and judge["temperature"] == 0.0
    )
    raw = rewards.trajectory_accuracy_grader_reward(
        "x", prompt="p", normalize_score=False, judge_api_base_url_env="JUDGE_URL"
    )
    assert raw == {"trajectory_accuracy": 1.0}
    # from a workflow, inside its event loop, the conversation comes along
    workflow = make_workflow(
        "math_workflow",
        {"prompt": "6*7?", "response": "42"},
        reward_fn_type="trajectory_accuracy_grader_reward",
        reward_fn_args={"judge_api_base_url_env": "JUDGE_URL"},
    )
    (experience,) = workflow.run()
    assert experience.reward == 0.0 == experience.metrics["trajectory_accuracy"]  # one reply: score 1
    assert openjudge[-1].graded[-1]["messages"][-2]["content"] == "6*7?"


def test_the_trajectory_grader_needs_its_judge_url_and_library(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match=r"judge's URL is missing: set \$OPENAI_BASE_URL"):
        rewards.trajectory_accuracy_grader_reward("x", prompt="p")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setitem(sys.modules, "openjudge", None)
    with pytest.raises(ImportError, match="pip install py-openjudge"):
        rewards.trajectory_accuracy_grader_reward("x", prompt="p")
    rewards._trajectory_runner.cache_clear()


# --- RM-Gallery (stand-in library) ---------------------------------------------------------


class Model:
    """Scores the answer's length and whether it matches the reference (a stand-in reward model)."""

    def __init__(self, **settings):
        self.settings = settings

    def evaluate(self, sample):
        answer = sample.output[0].answer
        details = [
            Dimension("length", float(len(answer.content))),
            Dimension("match", float(answer.content == answer.label["reference"])),
        ]
        answer.reward = types.SimpleNamespace(details=details if self.settings.get("dimensions") else [], score=0.5)
        self.sample = sample
        return sample


@dataclass
class Dimension:
    name: str
    score: float


@pytest.fixture
def rm_gallery(monkeypatch):
    made: list[Model] = []

    def get(name):
        assert name == "stand_in_reward"
        return lambda **settings: made.append(Model(**settings)) or made[-1]

    def record(**fields):
        return types.SimpleNamespace(**fields)

    install(
        monkeypatch,
        **{
            "rm_gallery": {},
            "rm_gallery.core.data.schema": {"Step": record, "DataSample": record, "DataOutput": record},
            "rm_gallery.core.model.message": {"ChatMessage": record, "MessageRole": str},
            "rm_gallery.core.reward.schema": {"RewardDimensionWithScore": Dimension, "RewardDimensionWithRank": list},
            "rm_gallery.core.reward.registry": {"RewardRegistry": types.SimpleNamespace(get=get)},
        },
    )
    yield made
    rewards._rm_gallery_model.cache_clear()


def test_rm_gallery_scores_become_components(rm_gallery):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "6*7?"}]
    scores = rewards.rm_gallery_reward("42", "42", messages=messages, reward_name="stand_in_reward", dimensions=True)
    assert scores == {"length": 2.0, "match": 1.0}
    (model,) = rm_gallery
    assert model.settings == {"dimensions": True}
    assert [(m.role, m.content) for m in model.sample.input] == [("system", "be brief"), ("user", "6*7?")]
    assert rewards.rm_gallery_reward("41", "42", prompt="6*7?", reward_name="stand_in_reward") == {"reward": 0.5}
    with pytest.raises(ValueError, match="reward_fn_args.reward_name"):
        rewards.rm_gallery_reward("42", "42", prompt="q")


def test_rm_gallery_missing_says_what_to_install(monkeypatch, make_workflow):
    monkeypatch.setitem(sys.modules, "rm_gallery", None)
    workflow = make_workflow(
        "math_workflow",
        {"prompt": "q", "response": "1"},
        reward_fn_type="rm_gallery_reward",
        reward_fn_args={"reward_name": "x"},
    )
    with pytest.raises(WorkflowError, match="pip install rm-gallery"):
        workflow.run()


def test_frozen_lake_episodes_graded_by_the_trajectory_grader(openjudge, make_workflow):
    """Trinity-RFT's frozenlake_openjudge example: workflow_args.reward_fn_type grades the episode."""
    grader = {
        "reward_fn_type": "trajectory_accuracy_grader_reward",
        "reward_fn_args": {"judge_api_base_url_env": "JUDGE_URL"},
    }
    workflow = make_workflow(
        "frozen_lake_workflow", {"size": 3, "p": 0.9, "seed": 7}, workflow_args={"agent_max_steps": 3, **grader}
    )
    (experience,) = workflow.run()
    turns = int(experience.metrics["env_steps"])
    assert experience.reward == experience.metrics["trajectory_accuracy"] == (turns - 1) / 2  # the judge's, normalised
    assert experience.metrics["env_reward"] in (0.0, 1.0)  # the environment's, kept as a metric
    assert openjudge[-1].graded[-1]["messages"] == experience.messages  # the whole episode was graded


def test_frozen_lake_s_reward_fn_type_must_be_installed():
    issues = IssueCollector()
    target = resolve(Kind.WORKFLOW, "frozen_lake_workflow")
    plugin_args(target, {"reward_fn_type": "trajectory_grader"}, "buffer.explorer_input.taskset.workflow_args", issues)
    (issue,) = issues.issues
    assert issue.path == "buffer.explorer_input.taskset.workflow_args.reward_fn_type"
    assert "trajectory_accuracy_grader_reward" in issue.message, issue.message

"""learn2ask_workflow: the tiny model samples the doctor's message; the judge is a scripted policy
(the hosted judge model cannot run here)."""

from __future__ import annotations

import pytest
from scripted_policy import ScriptedPolicy, scripted_workflow

from trinity_workflows.base import WorkflowError
from trinity_workflows.learn2ask import fuse

DIALOGUE = [{"role": "user", "content": "I have a headache."}]
ROW = {"prompt": DIALOGUE, "decision_truth": "continue", "info_truth": "duration of the headache"}
VERDICT = "<think>one question, on the point</think><format_score>1.0</format_score><content_score>0.5</content_score>"


@pytest.mark.parametrize(
    ("mode", "fusion", "reward"),
    [
        ("Ra+Rs", "default", 1 * (1 + 2 * 0.5) + 1),
        ("Ra+Rs", "sum", 1 + 0.5 + 1),
        ("Ra", "default", 2),
        ("Rs", "sum", 4),
    ],
)
def test_a_question_graded_by_the_judge_is_fused_by_train_mode(model, mode, fusion, reward):
    judge = ScriptedPolicy(model, [VERDICT])
    workflow, policy = scripted_workflow(
        model,
        "learn2ask_workflow",
        ROW,
        ["How long has it lasted: hours, days or weeks?"],
        auxiliary_models=[judge],
        workflow_args={"train_mode": mode, "fusion_mode": fusion},
    )
    (experience,) = workflow.run()
    assert experience.reward == pytest.approx(reward)
    assert experience.metrics == pytest.approx({"action_score": 1.0, "content_score": 0.5, "format_score": 1.0})
    system = policy.seen[0][0]["content"]
    assert ("<stop />" in system) is (mode != "Ra")
    (judge_messages,) = judge.seen
    assert "duration of the headache" in judge_messages[0]["content"]
    assert (
        judge_messages[1]["content"]
        == "patient: I have a headache.\ndoctor: How long has it lasted: hours, days or weeks?\n"
    )


@pytest.mark.parametrize(
    ("truth", "reply", "scores"),
    [
        ("stop", "<stop />", (1.0, 1.0, 1.0)),
        ("stop", "I think <stop />", (1.0, 1.0, 0.0)),
        ("stop", "Any fever?", (0.0, 0.0, 0.0)),
        ("continue", "<stop />", (0.0, 0.0, 0.0)),
    ],
)
def test_stop_decisions_need_no_judge(model, truth, reply, scores):
    judge = ScriptedPolicy(model, [])
    workflow, _ = scripted_workflow(
        model, "learn2ask_workflow", {**ROW, "decision_truth": truth}, [reply], auxiliary_models=[judge]
    )
    (experience,) = workflow.run()
    action, content, form = scores
    assert experience.reward == pytest.approx(fuse(action, content, form, "Ra+Rs", "default")) and judge.seen == []


def test_the_tiny_model_samples_every_repeat_and_needs_a_judge(make_workflow, model):
    judge = ScriptedPolicy(model, ["no tags"] * 3)
    experiences = make_workflow("learn2ask_workflow", ROW, auxiliary_models=[judge], repeat_times=3).run()
    assert len(experiences) == 3 and all(e.metrics["format_score"] == 0.0 for e in experiences)
    with pytest.raises(WorkflowError, match="auxiliary_models"):
        make_workflow("learn2ask_workflow", ROW).run()

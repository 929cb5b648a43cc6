"""RAFT_alfworld_workflow and RAFT_reflect_alfworld_workflow against the ALFWorld stand-in
(``standin_envs/``: ALFWorld needs its game data, a download), with a scripted policy and the tiny model."""

from __future__ import annotations

import pytest
from scripted_policy import scripted_workflow
from test_envs import received, script, standin_envs  # noqa: F401 -- standin_envs is a fixture

from trinity.plugins import Kind, resolve
from trinity_workflows.envs.raft_alfworld import RAFT_PROMPT, parse_reply

pytestmark = pytest.mark.usefixtures("standin_envs")


def reply(action: str, experience: str = "Look before you act.") -> str:
    return f"<experience>{experience}</experience>\n<think>I will {action}.</think>\n<action>{action}</action>"


def play(model, workflow: str, game, replies, is_eval=False, steps=5):
    return scripted_workflow(
        model, workflow, {"prompt": str(game)}, replies, workflow_args={"max_env_steps": steps}, is_eval=is_eval
    )


def test_replies_need_all_three_parts_in_order():
    assert parse_reply(reply("look")) == ("Look before you act.", "I will look.", "look")
    assert parse_reply("<think>t</think><experience>e</experience><action>look</action>") == ("", "", "")
    assert not all(parse_reply(reply("look", experience="")))


def test_a_well_formed_won_game_becomes_fine_tuning_data(model, tmp_path):
    game, log = script(tmp_path, [0.0, 0.0, 1.0])
    workflow, policy = play(
        model, "RAFT_alfworld_workflow", game, [reply("look"), reply("go to desk 1"), reply("open drawer 1")]
    )
    (experience,) = workflow.run()
    assert experience.reward == 1.0 and received(log) == ["look", "go to desk 1", "open drawer 1"]
    assert experience.metrics["success"] == 1.0 and experience.metrics["steps"] == 3
    assert experience.messages[0]["content"] == RAFT_PROMPT and "<experience>" in RAFT_PROMPT
    assert [m["content"] for m in experience.messages if m["role"] == "assistant"][-1] == reply("open drawer 1")


@pytest.mark.parametrize(
    ("rewards", "replies"),
    [
        ([0.0, 1.0], [reply("look"), reply("open drawer 1", experience="")]),  # won, a reply lacks its experience
        ([0.0] * 9, [reply("look"), reply("look"), reply("look")]),  # the third identical action ends the game
    ],
)
def test_malformed_or_lost_games_give_no_data(model, tmp_path, rewards, replies):
    game, log = script(tmp_path, rewards)
    workflow, _ = play(model, "RAFT_alfworld_workflow", game, replies)
    assert workflow.run() == []
    assert len(received(log)) == 2


def test_an_evaluation_game_is_reported_whatever_its_outcome(model, tmp_path):
    game, _ = script(tmp_path, [0.0] * 9)
    workflow, _ = play(model, "RAFT_alfworld_workflow", game, [reply("look"), reply("wait")], is_eval=True, steps=2)
    (experience,) = workflow.run()
    assert experience.metrics["success"] == 0.0 and experience.metrics["steps"] == 2


def test_after_a_lost_game_a_better_second_attempt_is_kept_without_the_first(model, tmp_path):
    game, log = script(tmp_path, [0.0, 0.0, 1.0])
    first = [reply("look")] * 3  # stalls: two actions taken, lost
    second = [reply("go to desk 1"), reply("open drawer 1"), reply("take key 1 from drawer 1")]
    workflow, policy = play(model, "RAFT_reflect_alfworld_workflow", game, first + second)
    (experience,) = workflow.run()
    assert received(log) == ["look", "look", "go to desk 1", "open drawer 1", "take key 1 from drawer 1"]
    seen_second = policy.seen[3]
    assert [m["content"] for m in seen_second if m["role"] == "assistant"] == [reply("look")] * 3
    note = seen_second[-2]
    assert (
        note["role"] == "system"
        and "you stopped after 3 steps" in note["content"]
        and "second attempt" in note["content"]
    )
    # the data is the second game alone, from the system prompt on
    assert experience.messages[0]["content"] == RAFT_PROMPT
    assert [m["content"] for m in experience.messages if m["role"] == "assistant"] == second
    assert experience.reward == 1.0 and experience.metrics["second_reward"] == 1.0
    assert experience.metrics["reward"] == 0.0 and experience.metrics["improvement"] == 1.0


def test_a_second_attempt_that_is_no_better_gives_no_data(model, tmp_path):
    game, _ = script(tmp_path, [0.0] * 9)
    replies = [reply("look"), reply("wait"), reply("look"), reply("wait")]
    workflow, policy = play(model, "RAFT_reflect_alfworld_workflow", game, replies, steps=2)
    assert workflow.run() == [] and len(policy.seen) == 4
    assert "reached the limit of 2 steps" in policy.seen[2][-2]["content"]


def test_the_tiny_model_writes_no_data(make_workflow, tmp_path):
    game, log = script(tmp_path, [0.0] * 9)
    workflow = make_workflow("RAFT_alfworld_workflow", {"prompt": str(game)}, workflow_args={"max_env_steps": 2})
    assert workflow.run() == [] and len(received(log)) == 2


def test_alfworld_workflow_v2_is_the_older_name_of_step_wise_alfworld(make_workflow, tmp_path):
    """Trinity-RFT's examples/grpo_alfworld/alfworldv2.yaml names the step-wise ALFWorld workflow so."""
    assert resolve(Kind.WORKFLOW, "alfworld_workflow_v2") is resolve(Kind.WORKFLOW, "step_wise_alfworld_workflow")
    game, _ = script(tmp_path, [0.0, 1.0])
    experiences = make_workflow("alfworld_workflow_v2", {"prompt": str(game)}).run()
    assert [e.eid.step for e in experiences] == [0, 1] and {e.reward for e in experiences} == {1.0}

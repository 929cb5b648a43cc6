"""thinking_budget_workflow on the tiny model: the end of thinking is a text the random model
cannot write within the budget, so every sample's end is forced there, masked, and followed by
an answer."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trinity.plugins import Kind, resolve
from trinity_workflows.base import WorkflowError
from trinity_workflows.rewards import accuracy_reward
from trinity_workflows.workflows import ThinkingBudgetArgs

END = "</thinking-is-over>"
ROW = {"messages": [{"role": "user", "content": "What is 2+2?"}], "response": "4"}


def test_the_end_of_thinking_is_forced_at_the_budget_and_masked(make_workflow, model):
    args = {"thinking_token_budget": 3, "reasoning_end_str": END}
    workflow = make_workflow(
        "thinking_budget_workflow", ROW, workflow_args=args, repeat_times=2, reward_fn_type="accuracy_reward"
    )
    experiences = workflow.run()
    end_ids = model.chat_tokenizer.encode(END)
    assert len(end_ids) > 3  # more tokens than the budget: never written within it
    assert len(experiences) == 2
    for exp in experiences:
        response = exp.tokens[exp.prompt_length :].tolist()
        assert exp.metrics["thinking_forced"] == 1.0
        assert response[3 : 3 + len(end_ids)] == end_ids  # after exactly the budget's 3 tokens
        assert exp.action_mask.tolist() == [True] * 3 + [False] * len(end_ids) + [True] * (
            len(response) - 3 - len(end_ids)
        )
        assert len(response) > 3 + len(end_ids)  # and then it answered
        assert exp.logprobs.shape == (len(response),) and END in exp.info["response_text"]
        assert exp.reward == accuracy_reward(exp.info["response_text"], "4")["accuracy"]
        assert exp.messages[0] == ROW["messages"][0]  # the row's messages column, as Trinity-RFT reads it


def test_the_recomputed_logprobs_are_the_models_own(make_workflow, model):
    args = {"thinking_token_budget": 2, "reasoning_end_str": END}
    (exp,) = make_workflow("thinking_budget_workflow", ROW, workflow_args=args).run()
    again = model.logprobs(exp.tokens.tolist())[exp.prompt_length :]
    assert exp.logprobs.tolist() == pytest.approx(again, abs=1e-4) and exp.reward == 0.0  # no reward function


@pytest.mark.parametrize(
    ("args", "field"),
    [({"thinking_token_budget": 0}, "thinking_token_budget"),
     ({"thinking_token_budget": 4, "reasoning_end_str": ""}, "reasoning_end_str")],
)  # fmt: skip
def test_bad_arguments_are_refused_by_name(args, field):
    with pytest.raises(ValidationError, match=field):
        ThinkingBudgetArgs.model_validate(args)
    assert resolve(Kind.WORKFLOW, "thinking_budget_workflow").Args is ThinkingBudgetArgs


def test_without_a_budget_the_workflow_says_which_argument_to_set(make_workflow, model):
    model.enable_history = True
    with pytest.raises(WorkflowError, match="set workflow_args.thinking_token_budget"):
        make_workflow("thinking_budget_workflow", ROW).run()
    assert model.extract_experience_from_history() == []  # before any sampling

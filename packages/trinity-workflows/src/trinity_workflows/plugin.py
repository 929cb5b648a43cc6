"""Registers the workflows and reward functions of the catalogue."""

from trinity.plugins import hookimpl

_WORKFLOWS = {
    "simple_workflow": "workflows:SimpleWorkflow",
    "math_workflow": "workflows:MathWorkflow",
    "math_boxed_workflow": "workflows:MathBoxedWorkflow",
    "math_eval_workflow": "workflows:MathEvalWorkflow",
    "countdown_workflow": "workflows:CountdownWorkflow",
    "on_policy_distill_workflow": "workflows:OnPolicyDistillWorkflow",
    "multi_turn_workflow": "conversation:MultiTurnWorkflow",
    "step_wise_workflow": "conversation:StepWiseWorkflow",
    "tool_call_workflow": "conversation:ToolCallWorkflow",
    "rubric_judge_workflow": "judge:RubricJudgeWorkflow",
}
_REWARDS = {
    "math_reward": "math_reward",
    "math_boxed_reward": "math_boxed_reward",
    "format_reward": "format_reward",
    "countdown_reward": "countdown_reward",
    "accuracy_reward": "accuracy_reward",
    "math_dapo_reward": "math_dapo_reward",
}


@hookimpl
def trinity_register_workflows(register):
    for name, target in _WORKFLOWS.items():
        register(name, f"trinity_workflows.{target}")


@hookimpl
def trinity_register_reward_fns(register):
    for name, fn in _REWARDS.items():
        register(name, f"trinity_workflows.rewards:{fn}")

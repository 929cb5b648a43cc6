"""Registers the workflows and reward functions of the catalogue."""

from trinity.plugins import hookimpl

_WORKFLOWS = {
    "simple_workflow": "SimpleWorkflow",
    "math_workflow": "MathWorkflow",
    "math_boxed_workflow": "MathBoxedWorkflow",
    "math_eval_workflow": "MathEvalWorkflow",
    "countdown_workflow": "CountdownWorkflow",
    "multi_turn_workflow": "MultiTurnWorkflow",
    "step_wise_workflow": "StepWiseWorkflow",
    "tool_call_workflow": "ToolCallWorkflow",
    "rubric_judge_workflow": "RubricJudgeWorkflow",
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
    for name, cls in _WORKFLOWS.items():
        register(name, f"trinity_workflows.workflows:{cls}")


@hookimpl
def trinity_register_reward_fns(register):
    for name, fn in _REWARDS.items():
        register(name, f"trinity_workflows.rewards:{fn}")

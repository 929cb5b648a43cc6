"""Registers the workflows and reward functions of the catalogue."""

from trinity.plugin_api import hookimpl, import_target

_WORKFLOWS = {
    "simple_workflow": "workflows:SimpleWorkflow",
    "math_workflow": "workflows:MathWorkflow",
    "math_boxed_workflow": "workflows:MathBoxedWorkflow",
    "math_eval_workflow": "workflows:MathEvalWorkflow",
    "countdown_workflow": "workflows:CountdownWorkflow",
    # Trinity-RFT's async_* twins: every workflow here is async-native (see base.py), so they
    # name the same classes
    "async_simple_workflow": "workflows:SimpleWorkflow",
    "async_math_workflow": "workflows:MathWorkflow",
    "async_math_boxed_workflow": "workflows:MathBoxedWorkflow",
    "async_math_eval_workflow": "workflows:MathEvalWorkflow",
    "async_math_rm_workflow": "judge:MathRMWorkflow",
    "async_math_ruler_workflow": "judge:MathRULERWorkflow",
    "on_policy_distill_workflow": "workflows:OnPolicyDistillWorkflow",
    "on_policy_distill_math_workflow": "workflows:OnPolicyDistillMathWorkflow",
    "thinking_budget_workflow": "workflows:ThinkingBudgetWorkflow",
    "multi_turn_workflow": "conversation:MultiTurnWorkflow",
    "step_wise_workflow": "conversation:StepWiseWorkflow",
    "tool_call_workflow": "conversation:ToolCallWorkflow",
    "toolcall_workflow": "toolcall:ToolCallPredictionWorkflow",
    "rubric_judge_workflow": "judge:RubricJudgeWorkflow",
    "math_rm_workflow": "judge:MathRMWorkflow",
    "math_ruler_workflow": "judge:MathRULERWorkflow",
    "math_trainable_ruler_workflow": "judge:MathTrainableRULERWorkflow",
    "rubric_judge_openai_workflow": "judge:RubricJudgeAPIWorkflow",
    "agentscope_react_workflow": "agents:AgentScopeReActWorkflow",
    "as_react_workflow": "agents:AgentScopeReActWorkflow",
    "agentscope_react_math_workflow": "agents:AgentScopeReActMathWorkflow",
    "agentscopev0_react_math_workflow": "agents:AgentScopeReActMathWorkflow",
    "agentscope_reactv2_math_workflow": "agents:AgentScopeReActMathWorkflow",
    "agentscope_reactv2_gsm8k_workflow": "agents:AgentScopeReActMathWorkflow",
    "agentscope_v1_react_search_workflow": "agents:AgentScopeReActSearchWorkflow",
    "agentscope_workflow_adapter": "agents:AgentScopeWorkflowAdapter",
    "agentscope_workflow_adapter_v1": "agents:AgentScopeWorkflowAdapter",
    "frozen_lake_workflow": "envs.frozen_lake:FrozenLakeWorkflow",
    "sudoku_workflow": "envs.sudoku:SudokuWorkflow",
    "alfworld_workflow": "envs.text_games:AlfworldWorkflow",
    "step_wise_alfworld_workflow": "envs.text_games:StepWiseAlfworldWorkflow",
    "alfworld_workflow_v2": "envs.text_games:StepWiseAlfworldWorkflow",  # its older name (Trinity-RFT's alfworldv2.yaml)
    "sciworld_workflow": "envs.text_games:SciWorldWorkflow",
    "webshop_workflow": "envs.text_games:WebShopWorkflow",
    "intercode_sql_workflow": "envs.intercode_sql:InterCodeSQLWorkflow",
    "email_search_workflow": "envs.email_search:EmailSearchWorkflow",
    "RAFT_alfworld_workflow": "envs.raft_alfworld:RAFTAlfworldWorkflow",
    "RAFT_reflect_alfworld_workflow": "envs.raft_alfworld:RAFTReflectAlfworldWorkflow",
    "learn2ask_workflow": "learn2ask:Learn2AskWorkflow",
    "bcp_simple_react_workflow": "envs.browse_comp:BCPSimpleReactWorkflow",
    "simple_mm_workflow": "multimodal:SimpleMMWorkflow",
    "async_simple_mm_workflow": "multimodal:SimpleMMWorkflow",
}
_REWARDS = {
    "math_reward": "math_reward",
    "math_boxed_reward": "math_boxed_reward",
    "format_reward": "format_reward",
    "countdown_reward": "countdown_reward",
    "accuracy_reward": "accuracy_reward",
    "math_dapo_reward": "math_dapo_reward",
    "rlcr_reward": "rlcr_reward",
    "rm_gallery_reward": "rm_gallery_reward",
    "trajectory_accuracy_grader_reward": "trajectory_accuracy_grader_reward",
}


@hookimpl
def trinity_register_workflows(register):
    for name, target in _WORKFLOWS.items():
        register(name, f"trinity_workflows.{target}")


@hookimpl
def trinity_register_reward_fns(register):
    for name, fn in _REWARDS.items():
        register(name, f"trinity_workflows.rewards:{fn}")


@hookimpl
def trinity_register_buffer_storages(register):
    register("env_service", "trinity_workflows.envs.env_service:EnvServiceStorage")


_RUN_NEEDS = {
    "email_search_workflow": ("db_path", "trinity_workflows.envs.email_search:INBOX_NEEDED"),
    "intercode_sql_workflow": ("db_dir", "trinity_workflows.envs.intercode_sql:DATABASES_NEEDED"),
}
"""Workflow args Trinity-RFT's example configs lack (its paths were hard-coded or in Docker):
they check, with a warning, and a run without them is refused."""


@hookimpl
def trinity_check_config(config, issues):
    """A buffer naming ``env_service`` (see envs/env_service.py), and a taskset of a workflow in
    ``_RUN_NEEDS`` without its path, are refused at run with what they need."""
    from trinity_workflows.envs.env_service import refuse_env_service

    refuse_env_service(config, issues)
    inputs = config.buffer.explorer_input
    tasksets = [(f"tasksets[{i}]", t) for i, t in enumerate(inputs.tasksets)]
    tasksets += [(f"eval_tasksets[{i}]", t) for i, t in enumerate(inputs.eval_tasksets)]
    for key, taskset in tasksets:
        arg, what = _RUN_NEEDS.get(taskset.default_workflow_type, (None, ""))
        if arg and not (taskset.workflow_args or {}).get(arg):
            issues.refuse_at_run(f"buffer.explorer_input.{key}.workflow_args.{arg}", f"required: {import_target(what)}")


DEFAULT_WORKFLOW = "math_workflow"
"""The workflow of tasksets that name none at any level, as the seed guides' examples expect."""


@hookimpl
def trinity_config_defaults(config, issues):
    """Tasksets that name no workflow at any level get ``math_workflow``."""
    inputs = config.buffer.explorer_input
    if inputs.default_workflow_type or config.buffer.default_workflow_type:
        return
    tasksets = [inputs.taskset] if inputs.taskset else inputs.tasksets
    if any(t.default_workflow_type is None and not t.format.workflow_key for t in tasksets):
        inputs.default_workflow_type = DEFAULT_WORKFLOW
        issues.warn("buffer.explorer_input.default_workflow_type", f"not set: using {DEFAULT_WORKFLOW}")

"""The kinds of plugin, and which known sibling distribution provides which name.

``KNOWN_PROVIDERS`` lets an unknown-name error say what to install. A test checks it
against what each sibling really registers, so it cannot drift.
"""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """A kind of plugin: its value is the singular noun used in the tables and errors."""

    WORKFLOW = "workflow"
    REWARD_FN = "reward_fn"
    ADVANTAGE_FN = "advantage_fn"
    POLICY_LOSS_FN = "policy_loss_fn"
    KL_FN = "kl_fn"
    ENTROPY_LOSS_FN = "entropy_loss_fn"
    SAMPLE_STRATEGY = "sample_strategy"
    ALGORITHM_TYPE = "algorithm_type"
    MONITOR = "monitor"
    BUFFER_STORAGE = "buffer_storage"
    TASK_SELECTOR = "task_selector"
    PRIORITY_FN = "priority_fn"
    SYNC_METHOD = "sync_method"
    ROLLOUT_ENGINE = "rollout_engine"
    TRAINER_ENGINE = "trainer_engine"
    EXPERIENCE_OPERATOR = "experience_operator"

    @property
    def hook_name(self) -> str:
        plural = {"sample_strategy": "sample_strategies"}.get(self.value, self.value + "s")
        return f"trinity_register_{plural}"

    @property
    def label(self) -> str:
        return self.value.replace("_fn", " function").replace("_", " ")

    def __str__(self) -> str:
        return self.value


# (kind, name) -> the extra of trinity-core that installs the sibling providing it.
_SIBLINGS = {
    "verl": {Kind.TRAINER_ENGINE: ["verl"]},
    "vllm": {Kind.ROLLOUT_ENGINE: ["vllm", "vllm_async"], Kind.SYNC_METHOD: ["nccl"]},
    "monitors": {Kind.MONITOR: ["tensorboard", "wandb", "mlflow"]},
    "workflows": {
        Kind.WORKFLOW: [
            "simple_workflow",
            "math_workflow",
            "math_boxed_workflow",
            "math_eval_workflow",
            "countdown_workflow",
            "on_policy_distill_workflow",
            "multi_turn_workflow",
            "step_wise_workflow",
            "tool_call_workflow",
            "rubric_judge_workflow",
            "frozen_lake_workflow",
            "sudoku_workflow",
            "alfworld_workflow",
            "step_wise_alfworld_workflow",
            "sciworld_workflow",
            "webshop_workflow",
            "math_rm_workflow",
            "math_ruler_workflow",
            "agentscope_react_workflow",
            "as_react_workflow",
            "async_simple_workflow",
            "async_math_workflow",
            "async_math_boxed_workflow",
            "async_math_eval_workflow",
            "async_math_rm_workflow",
            "async_math_ruler_workflow",
            "on_policy_distill_math_workflow",
            "math_trainable_ruler_workflow",
            "rubric_judge_openai_workflow",
            "thinking_budget_workflow",
            "toolcall_workflow",
            "simple_mm_workflow",
            "async_simple_mm_workflow",
            "agentscope_workflow_adapter",
            "agentscope_workflow_adapter_v1",
            "agentscope_react_math_workflow",
            "agentscopev0_react_math_workflow",
            "agentscope_reactv2_math_workflow",
            "agentscope_reactv2_gsm8k_workflow",
            "agentscope_v1_react_search_workflow",
            "email_search_workflow",
            "intercode_sql_workflow",
            "RAFT_alfworld_workflow",
            "RAFT_reflect_alfworld_workflow",
            "alfworld_workflow_v2",
            "bcp_simple_react_workflow",
            "learn2ask_workflow",
        ],
        Kind.REWARD_FN: [
            "math_reward",
            "math_boxed_reward",
            "format_reward",
            "countdown_reward",
            "accuracy_reward",
            "math_dapo_reward",
            "rlcr_reward",
            "rm_gallery_reward",
            "trajectory_accuracy_grader_reward",
        ],
        Kind.BUFFER_STORAGE: ["env_service"],
    },
}

KNOWN_PROVIDERS: dict[tuple[Kind, str], str] = {
    (kind, name): extra for extra, kinds in _SIBLINGS.items() for kind, names in kinds.items() for name in names
}


def sibling_distribution(extra: str) -> str:
    """The distribution behind an extra of trinity-core (``verl`` -> ``trinity-verl``)."""
    return f"trinity-{extra}"

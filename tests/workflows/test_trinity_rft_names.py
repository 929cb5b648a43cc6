"""Every workflow name of Trinity-RFT's registry (``trinity/common/workflows/__init__.py``, v0.6)
and of its examples that trinity runs resolves here to a workflow class (issue 33's "done when")."""

from __future__ import annotations

import pytest

from trinity.explorer.workflow import Workflow
from trinity.plugins import Kind, resolve

REGISTRY = """simple_workflow async_simple_workflow math_workflow async_math_workflow math_boxed_workflow
async_math_boxed_workflow math_eval_workflow async_math_eval_workflow math_rm_workflow async_math_rm_workflow
tool_call_workflow agentscope_workflow_adapter agentscope_workflow_adapter_v1 agentscope_react_workflow
agentscope_react_math_workflow as_react_workflow agentscopev0_react_math_workflow
agentscope_v1_react_search_workflow email_search_workflow alfworld_workflow RAFT_alfworld_workflow
RAFT_reflect_alfworld_workflow frozen_lake_workflow sciworld_workflow webshop_workflow intercode_sql_workflow
step_wise_alfworld_workflow async_math_ruler_workflow math_ruler_workflow math_trainable_ruler_workflow
rubric_judge_workflow rubric_judge_openai_workflow simple_mm_workflow async_simple_mm_workflow
on_policy_distill_workflow on_policy_distill_math_workflow thinking_budget_workflow sudoku_workflow""".split()
EXAMPLES = [
    "toolcall_workflow",
    "agentscope_reactv2_math_workflow",
    "agentscope_reactv2_gsm8k_workflow",
    "alfworld_workflow_v2",
    "bcp_simple_react_workflow",
    "learn2ask_workflow",
]


@pytest.mark.parametrize("name", REGISTRY + EXAMPLES)
def test_a_trinity_rft_workflow_name_is_registered(name):
    assert issubclass(resolve(Kind.WORKFLOW, name), Workflow)

"""Agent-framework workflows: an agent written for a framework, run against the rollout model.

``agentscope_react_workflow`` (alias ``as_react_workflow``) runs an AgentScope ReAct agent
whose chat model talks to the rollout model's OpenAI endpoint through the workflow's
recording client, so every call the agent makes becomes an experience. The same shape
serves any framework that takes an OpenAI client or base URL (LangGraph, the OpenAI Agents
SDK, a plain ``openai`` loop): see docs/agents.md.

Needs ``pip install "trinity-workflows[agentscope]"`` and, on the rollout model,
``enable_openai_api: true`` and ``enable_history: true``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trinity.plugin_api import Experience, Field, PluginArgs, set_reward
from trinity_workflows.base import CatalogueWorkflow, require

INSTALL = 'pip install "trinity-workflows[agentscope]"'
REACT_SYSTEM_PROMPT = "You are a helpful assistant. Solve the task step by step and state the final answer clearly."


class ReActArgs(PluginArgs):
    """``workflow_args`` of ``agentscope_react_workflow``."""

    max_iters: int = Field(10, ge=1, description="most reasoning-acting iterations of the agent")
    agent_name: str = Field("assistant", description="the agent's name in its memory")
    inject_runtime_state: bool = Field(
        True,
        description="AgentScope's runtime state (the current time, tasks, context length) injected into the "
        "agent's context; false keeps prompts free of the wall clock (a new prompt every second)",
    )


class AgentScopeReActWorkflow(CatalogueWorkflow):
    """One task, one ReAct agent: the agent answers the row's prompt; its final reply is
    scored with the task's reward function (default ``math_reward``) and every model call it
    made becomes an experience (``eid.step`` = call order) with that reward. Metric
    ``agent_calls``: the calls of the run. System prompt: the task's, else a generic one.
    """

    Args = ReActArgs
    can_repeat = False
    default_reward_fn = "math_reward"
    default_system_prompt = REACT_SYSTEM_PROMPT

    async def agent(self) -> Any:
        """The AgentScope ReAct agent, its model wired to the recording OpenAI client."""
        if not self.model.enable_history:
            raise ValueError(
                "an agent's calls are recorded through the model's history: "
                "set explorer.rollout_model.enable_history: true (and enable_openai_api: true)"
            )
        args = ReActArgs.model_validate(self.task.workflow_args)
        agent_module = require("agentscope.agent", INSTALL)
        credential = require("agentscope.credential", INSTALL).OpenAICredential
        model_module = require("agentscope.model", INSTALL)
        client = self.model.get_openai_async_client()
        defaults = self.model.defaults
        chat_model = model_module.OpenAIChatModel(
            credential=credential(api_key=client.api_key, base_url=str(client.base_url)),
            model=(await client.models.list()).data[0].id,  # the name the endpoint serves
            stream=False,  # the recording client takes whole responses
            max_retries=0,
            parameters=model_module.OpenAIChatModel.Parameters(
                max_tokens=defaults.max_tokens, temperature=defaults.temperature
            ),
        )
        chat_model.client = client
        return agent_module.Agent(
            name=args.agent_name,
            system_prompt=self.system_prompt or REACT_SYSTEM_PROMPT,
            model=chat_model,
            react_config=agent_module.ReActConfig(max_iters=args.max_iters),
            injection_config=agent_module.InjectionConfig(inject_runtime_state=args.inject_runtime_state),
        )

    async def rollout(self) -> list[Experience]:
        agent = await self.agent()
        message = require("agentscope.message", INSTALL)
        reply = await agent.reply(message.UserMsg(name="user", content=self.user_prompt))
        answer = reply.get_text_content() or ""
        components = self.score(answer, self.truth, self.user_prompt)
        experiences = self.model.extract_experience_from_history()
        for step, experience in enumerate(experiences):
            experience.eid = replace(experience.eid, step=step)
            set_reward(experience, components)
            experience.metrics["agent_calls"] = float(len(experiences))
            experience.info["agent_answer"] = answer
        return experiences

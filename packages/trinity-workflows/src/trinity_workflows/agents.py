"""Agent-framework workflows: an agent written for a framework, run against the rollout model.

``agentscope_react_workflow`` (alias ``as_react_workflow``) runs an AgentScope ReAct agent whose chat
model talks to the rollout model's OpenAI endpoint through the workflow's recording client, so every
call the agent makes becomes an experience. Trinity-RFT's math agent, search agent and adapter take
the same road; any framework that takes an OpenAI client or base URL fits the same shape
(docs/agents.md). Needs ``pip install "trinity-workflows[agentscope]"`` and, on the rollout model,
``enable_openai_api: true`` and ``enable_history: true``.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict

from trinity.plugin_api import Experience, Field, ModelWrapper, PluginArgs, import_target, set_reward
from trinity_workflows.base import CatalogueWorkflow, require
from trinity_workflows.judge import JudgedWorkflow
from trinity_workflows.tools import calculator as _calculator

INSTALL = 'pip install "trinity-workflows[agentscope]"'
logger = logging.getLogger(__name__)
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


async def chat_model(model: ModelWrapper, max_tokens: int | None, temperature: float | None) -> Any:
    """An AgentScope chat model whose calls go to ``model``'s OpenAI endpoint through its client
    (recorded as experiences when the wrapper has ``enable_history``)."""
    credential = require("agentscope.credential", INSTALL).OpenAICredential
    model_module = require("agentscope.model", INSTALL)
    client = model.get_openai_async_client()
    chat = model_module.OpenAIChatModel(
        credential=credential(api_key=client.api_key, base_url=str(client.base_url)),
        model=(await client.models.list()).data[0].id,  # the name the endpoint serves
        stream=False,  # the recording client takes whole responses
        max_retries=0,
        parameters=model_module.OpenAIChatModel.Parameters(max_tokens=max_tokens, temperature=temperature),
    )
    chat.client = client
    return chat


def require_history(model: ModelWrapper) -> None:
    """Agents' calls become experiences through the rollout model's history."""
    if not model.enable_history:
        raise ValueError(
            "an agent's calls are recorded through the model's history: "
            "set explorer.rollout_model.enable_history: true (and enable_openai_api: true)"
        )


class AgentScopeReActWorkflow(CatalogueWorkflow):
    """One task, one ReAct agent: the agent answers the row's prompt; its final reply is
    scored with the task's reward function (default ``math_reward``) and every model call it
    made becomes an experience (``eid.step`` = call order) with that reward. Metric
    ``agent_calls``: the calls of the run. System prompt: the task's, else a generic one.
    Subclasses give the agent tools (``tools``) and grade its answer (``grade``).
    """

    Args = ReActArgs
    can_repeat = False
    default_reward_fn = "math_reward"
    default_system_prompt = REACT_SYSTEM_PROMPT

    @property
    def args(self) -> ReActArgs:
        return self.Args.model_validate(self.task.workflow_args)

    def tools(self) -> list[Callable[..., Any]]:
        """The Python functions the agent may call (none here)."""
        return []

    async def agent(self) -> Any:
        """The AgentScope ReAct agent, its model wired to the recording OpenAI client."""
        require_history(self.model)
        args = self.args
        agent_module = require("agentscope.agent", INSTALL)
        toolkit = None
        if tools := self.tools():
            tool_module = require("agentscope.tool", INSTALL)
            toolkit = tool_module.Toolkit(tools=[tool_module.FunctionTool(fn) for fn in tools])
        defaults = self.model.defaults
        return agent_module.Agent(
            name=args.agent_name,
            system_prompt=self.system_prompt or REACT_SYSTEM_PROMPT,
            model=await chat_model(self.model, defaults.max_tokens, defaults.temperature),
            toolkit=toolkit,
            react_config=agent_module.ReActConfig(max_iters=args.max_iters),
            injection_config=agent_module.InjectionConfig(inject_runtime_state=args.inject_runtime_state),
        )

    async def grade(self, answer: str) -> dict[str, float]:
        """The reward components of the agent's final answer."""
        return self.score(answer, self.truth, self.user_prompt)

    async def rollout(self) -> list[Experience]:
        agent = await self.agent()
        message = require("agentscope.message", INSTALL)
        reply = await agent.reply(message.UserMsg(name="user", content=self.user_prompt))
        answer = reply.get_text_content() or ""
        components = await self.grade(answer)
        experiences = self.model.extract_experience_from_history()
        for step, experience in enumerate(experiences):
            experience.eid = replace(experience.eid, step=step)
            set_reward(experience, components)
            experience.metrics["agent_calls"] = float(len(experiences))
            experience.info["agent_answer"] = answer
        return experiences


MATH_AGENT_PROMPT = (
    "You are an agent that solves math problems with tools. Work out the problem given to you, using the "
    "calculator tool for arithmetic, and give your final answer within \\boxed{}."
)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * /, parentheses) and return its value.

    Args:
        expression: the expression, e.g. "(17 + 3) * 4".
    """
    try:
        return f"{_calculator(expression):g}"
    except Exception as exc:  # the model learns from the error; it is not a crash
        return f"error: {exc}"


class AgentScopeReActMathWorkflow(AgentScopeReActWorkflow):
    """A ReAct agent that solves math problems with a calculator tool and answers in ``\\boxed{}``
    (Trinity-RFT's ``agentscope_react_math_workflow``, its AgentScope v0 twin
    ``agentscopev0_react_math_workflow`` and its examples' ``agentscope_reactv2_math_workflow`` /
    ``_gsm8k_workflow``), graded by ``math_boxed_reward``; a GSM8K truth (``... #### 42``) is
    its number after ``####``. Trinity-RFT's agents run the model's Python code instead of a
    calculator: nothing the model writes is executed here (docs/security.md).
    """

    default_reward_fn = "math_boxed_reward"
    default_system_prompt = MATH_AGENT_PROMPT

    def tools(self) -> list[Callable[..., Any]]:
        return [calculator]

    @property
    def truth(self) -> Any:
        truth = super().truth
        return truth.split("####")[-1].strip() if isinstance(truth, str) and "####" in truth else truth


# --- search ---------------------------------------------------------------------------------

SEARCH_AGENT_PROMPT = (
    "You are an expert at finding information. Search for what the question needs, read what the searches "
    "return, and answer the question accurately and briefly."
)
SEARCH_JUDGE_PROMPT = """Decide whether a response to a question gives the correct answer.

Question: {question}
Response: {response}
Correct answer: {truth}

Compare the response with the correct answer only: the same meaning, or a number within a small \
rounding margin, is correct. Explain in one or two sentences, then end with the line \
"Correctness: YES" or "Correctness: NO"."""
_CORRECTNESS = re.compile(r"correctness\W{0,4}(yes|no)\b", re.IGNORECASE)


def parse_correctness(text: str) -> float | None:
    """1.0 for the last ``Correctness: YES``, 0.0 for ``NO``, None when the text has neither."""
    verdicts = _CORRECTNESS.findall(text)
    return (1.0 if verdicts[-1].lower() == "yes" else 0.0) if verdicts else None


class SearchArgs(ReActArgs):
    """``workflow_args`` of ``agentscope_v1_react_search_workflow``."""

    model_config = ConfigDict(**ReActArgs.model_config, populate_by_name=True)
    max_iters: int = Field(
        10, ge=1, alias="max_turns", description="most reasoning-acting iterations of the agent (or max_iters)"
    )
    search_client_type: Literal["local", "searxng", "tavily"] = Field(
        "local",
        description="local: search_corpus, or search_function; searxng / tavily (Trinity-RFT's web searches "
        "through npx MCP servers) are refused: point search_function at your own search instead",
    )
    search_corpus: str | None = Field(None, description="JSONL file of documents ({title, text}) the search tool reads")
    search_function: str | None = Field(
        None, description='"package.module:function" taking a query and returning text, used instead of the corpus'
    )
    search_results: int = Field(3, ge=1, description="documents a local search returns")
    max_model_tokens: int = Field(24000, ge=1, description="experiences longer than this many tokens are dropped")
    judge_model: int = Field(0, ge=0, description="the judge: index into explorer.auxiliary_models")
    judge_retries: int = Field(2, ge=0, description="times a judge reply without a verdict is asked again")
    judge_sampling: dict[str, Any] = Field({}, description="sampling arguments of the judge's calls")


def corpus_search(path: str, count: int) -> Callable[[str], str]:
    """A search tool over a JSONL corpus: the ``count`` documents sharing the most words with the
    query (a local stand-in for a web search)."""
    documents = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    for number, doc in enumerate(documents, 1):
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            raise ValueError(f"{path} row {number}: a document is an object with a 'text' (and a 'title')")
    words = [set(re.findall(r"\w+", f"{d.get('title', '')} {d['text']}".lower())) for d in documents]

    def search(query: str) -> str:
        """Search the web for a query; returns the most relevant pages.

        Args:
            query: what to search for.
        """
        wanted = set(re.findall(r"\w+", query.lower()))
        ranked = sorted(range(len(documents)), key=lambda i: -len(wanted & words[i]))[:count]
        hits = [documents[i] for i in ranked if wanted & words[i]]
        return "\n\n".join(f"{d.get('title', '')}\n{d['text']}".strip() for d in hits) or "no results"

    return search


class AgentScopeReActSearchWorkflow(AgentScopeReActWorkflow, JudgedWorkflow):
    """A ReAct agent that answers a question with a search tool (Trinity-RFT's
    ``agentscope_v1_react_search_workflow``); the judge
    (``explorer.auxiliary_models[judge_model]``) says whether its answer matches the row's
    truth: reward 1 or 0. Trinity-RFT searches the web through SearXNG or Tavily MCP servers
    run with ``npx``; here the tool searches ``search_corpus`` or calls ``search_function``.
    Experiences over ``max_model_tokens`` are dropped.
    """

    Args = SearchArgs
    default_reward_fn = None
    default_system_prompt = SEARCH_AGENT_PROMPT

    def tools(self) -> list[Callable[..., Any]]:
        args = self.args
        if args.search_client_type != "local":
            raise ValueError(
                f"workflow_args.search_client_type {args.search_client_type!r}: web searches through npx MCP "
                "servers are not wired here; set search_client_type: local with workflow_args.search_function "
                '("package.module:function" calling your search service) or search_corpus'
            )
        if args.search_function:
            return [import_target(args.search_function)]
        if args.search_corpus:
            return [corpus_search(args.search_corpus, args.search_results)]
        raise ValueError("no search tool: set workflow_args.search_corpus or workflow_args.search_function")

    async def grade(self, answer: str) -> dict[str, float]:
        prompt = SEARCH_JUDGE_PROMPT.format(question=self.user_prompt, response=answer, truth=self.truth)
        verdict, _ = await self.ask_judge(self.judge, prompt, parse_correctness, "Correctness: YES or NO")
        return {"accuracy": verdict}

    async def rollout(self) -> list[Experience]:
        self.judge  # noqa: B018 (no judge fails the task before the agent runs)
        limit = self.args.max_model_tokens
        return [e for e in await super().rollout() if len(e.tokens) <= limit]


# --- a user's agent function ------------------------------------------------------------------


class AdapterArgs(PluginArgs):
    """``workflow_args`` of ``agentscope_workflow_adapter`` (and ``_v1``)."""

    workflow_func: str | None = Field(
        None,
        description="(required) "
        '"package.module:function": async (task, model[, auxiliary_models, logger]) -> reward, or an '
        "object or dict with reward (optional with judge_func), response and metrics",
    )
    judge_func: str | None = Field(
        None,
        description='"package.module:function": async (task, response[, auxiliary_models, logger]) -> reward, or '
        "an object or dict with reward and metrics",
    )


def _field(output: Any, name: str) -> Any:
    return output.get(name) if isinstance(output, dict) else getattr(output, name, None)


class AgentScopeWorkflowAdapter(CatalogueWorkflow):
    """Runs the user's AgentScope agent function on each task (Trinity-RFT's
    ``agentscope_workflow_adapter`` and ``agentscope_workflow_adapter_v1``, AgentScope's
    ``tune`` interface). ``workflow_func`` gets the row (``task``), an AgentScope chat model on
    the rollout model (``model``) and, if it declares them, ``auxiliary_models`` (chat models
    keyed by the name each auxiliary model serves) and ``logger``; it returns the reward, or an
    object or dict with ``reward``, ``response`` and ``metrics``. With ``judge_func``, the
    judge's reward (from the row and that ``response``) counts instead. Every call the agent
    made is an experience (``eid.step`` = call order) with that reward; the metrics go on the
    last one. The functions are named in the config the user wrote, never by a task row.
    """

    Args = AdapterArgs
    can_repeat = False
    needs_reward_fn = False

    async def _call(self, path: str, **inputs: Any) -> Any:
        function = import_target(path)
        declared = inspect.signature(function).parameters
        if "auxiliary_models" in declared:
            inputs["auxiliary_models"] = {
                (await m.get_openai_async_client().models.list()).data[0].id: await chat_model(
                    m, m.defaults.max_tokens, m.defaults.temperature
                )
                for m in self.auxiliary_models
            }
        if "logger" in declared:
            inputs["logger"] = logger
        result = function(**inputs)
        return await result if inspect.isawaitable(result) else result

    @staticmethod
    def _reward(output: Any, function: str) -> float:
        reward = output if isinstance(output, int | float) else _field(output, "reward")
        if not isinstance(reward, int | float) or isinstance(reward, bool):
            raise TypeError(f"{function} returned {type(output).__name__} without a numeric reward")
        return float(reward)

    async def rollout(self) -> list[Experience]:
        require_history(self.model)
        args = AdapterArgs.model_validate(self.task.workflow_args)
        if not args.workflow_func:
            raise ValueError('no agent: set workflow_args.workflow_func ("package.module:function")')
        defaults = self.model.defaults
        model = await chat_model(self.model, defaults.max_tokens, defaults.temperature)
        output = await self._call(args.workflow_func, task=self.task.raw, model=model)
        metrics = {} if isinstance(output, int | float) else dict(_field(output, "metrics") or {})
        if args.judge_func:
            response = None if isinstance(output, int | float) else _field(output, "response")
            judged = await self._call(args.judge_func, task=self.task.raw, response=response)
            reward = self._reward(judged, "judge_func")
            metrics.update(({} if isinstance(judged, int | float) else _field(judged, "metrics")) or {})
        else:
            reward = self._reward(output, "workflow_func")
        experiences = self.model.extract_experience_from_history()
        for step, experience in enumerate(experiences):
            experience.eid = replace(experience.eid, step=step)
            experience.reward = reward
        if experiences:
            experiences[-1].metrics.update({k: float(v) for k, v in metrics.items()})
        return experiences

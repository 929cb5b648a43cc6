"""``bcp_simple_react_workflow``: answer a BrowseComp-Plus question by searching its document corpus
with tools (Trinity-RFT's ``envs/browse_comp_plus``).

The model calls ``search`` (and, with ``include_get_document``, ``get_document``) until a reply
without a tool call, its final answer; one experience per reply, all rewarded 1 when the judge
(``explorer.auxiliary_models[0]``) finds the answer matches the reference, else 0. The searcher is
BrowseComp-Plus's (e.g. BM25 over a Pyserini index), imported from ``browsecomp_path`` or
``$BROWSECOMP_PATH`` (a checkout of https://github.com/texttron/BrowseComp-Plus): it is not on PyPI.
Rules and metrics: the package README.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

from trinity.plugin_api import Experience, Field, ModelWrapper, PluginArgs, Task
from trinity_workflows.base import Messages, require
from trinity_workflows.conversation import StepWiseWorkflow, ToolUse
from trinity_workflows.tools import ToolFunction, parse_tool_calls

SYSTEM_PROMPT = (
    "You are a helpful search assistant. Use the available search tools to find relevant information "
    "and provide comprehensive answers."
)
USER_PROMPT = """You are a deep research agent. Answer the question by using the search tool, reasoning \
and calling the tool step by step, interleaved.

NOTE:
  - Call one tool at a time. Use short keywords as the search query.
  - Give your reasoning (your chain of thought) before each tool call.
  - When you stop calling tools, give your final answer with the explanation for it.

Question: {question}

Your final response should be in the following format:
Exact Answer: {{your succinct, final answer}}"""

JUDGE_PROMPT = """You are an expert judge: decide whether an agent's response to a question is correct.

Question: {question}
Ground truth answer: {truth}
Agent's response: {response}

Extract the agent's final answer and compare it with the ground truth: it is correct only if it is \
semantically equivalent (minor wording differences, and numbers within 1% or 0.1 units, are fine; \
extra correct information is fine; an ambiguous, contradictory or missing answer is incorrect).

Respond with a JSON object only:
{{"extracted_answer": "the agent's final answer, or null", "reasoning": "why it is or is not correct", \
"is_correct": true or false}}"""

RESULT_LIMIT = 2500
INSTALL = "set workflow_args.browsecomp_path (or $BROWSECOMP_PATH) to a checkout of BrowseComp-Plus"


class BCPArgs(PluginArgs):
    """``workflow_args`` of ``bcp_simple_react_workflow`` (Trinity-RFT's)."""

    max_iterations: int = Field(100, ge=1, description="most model replies per episode")
    max_model_tokens: int = Field(24000, ge=1, description="replies with more tokens are left out of training")
    top_k: int = Field(5, ge=1, description="documents a search returns")
    snippet_max_tokens: int = Field(512, ge=0, description="words of a document a search shows (0: all)")
    include_get_document: bool = Field(False, description="offer the get_document tool")
    searcher_type: str = Field("bm25", description="BrowseComp-Plus searcher (SearcherType)")
    index_path: str = Field("indexes/bm25", description="the searcher's index")
    browsecomp_path: str | None = Field(None, description="BrowseComp-Plus checkout (default $BROWSECOMP_PATH)")


@functools.lru_cache(maxsize=4)
def load_searcher(searcher_type: str, index_path: str, browsecomp_path: str | None) -> Any:
    """BrowseComp-Plus's searcher of that type over ``index_path``, built once per process."""
    if browsecomp_path and browsecomp_path not in sys.path:
        sys.path.insert(0, browsecomp_path)
    searchers = require("searcher.searchers", INSTALL)
    kind = searchers.SearcherType.get_searcher_class(searcher_type)
    return kind(SimpleNamespace(index_path=index_path, hf_token=None, hf_home=None))


def cut(text: str) -> str:
    """A tool result as the model sees it: at most ``RESULT_LIMIT`` characters."""
    return text if len(text) <= RESULT_LIMIT else f"{text[:RESULT_LIMIT]}\n\n... (truncated from {len(text)} chars)"


def parse_verdict(text: str) -> bool:
    """The judge's ``is_correct`` (False when its reply holds no usable verdict or no answer)."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        verdict = json.loads(match.group(0) if match else text)
        return (
            isinstance(verdict, dict)
            and verdict.get("extracted_answer") is not None
            and bool(verdict.get("is_correct"))
        )
    except json.JSONDecodeError:
        found = re.search(r'"is_correct"\s*:\s*(true|false)', text, re.IGNORECASE)
        return bool(found) and found.group(1).lower() == "true"


class BCPSimpleReactWorkflow(ToolUse, StepWiseWorkflow):
    """A BrowseComp-Plus search episode, one experience per reply (see the module doc)."""

    Args: ClassVar[type[PluginArgs]] = BCPArgs
    needs_reward_fn = False

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: Sequence[ModelWrapper] = ()):
        super().__init__(task, model, auxiliary_models)
        self.args = BCPArgs.model_validate(task.workflow_args)
        self.used: Counter[str] = Counter()

    @property
    def max_turns(self) -> int:
        return self.args.max_iterations

    @functools.cached_property
    def searcher(self) -> Any:
        args = self.args
        return load_searcher(
            args.searcher_type, args.index_path, args.browsecomp_path or os.environ.get("BROWSECOMP_PATH")
        )

    @functools.cached_property
    def tools(self) -> list[dict[str, Any]]:
        def tool(name: str, description: str, argument: str) -> dict[str, Any]:
            properties = {argument: {"type": "string"}}
            parameters = {"type": "object", "properties": properties, "required": [argument]}
            return {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            }

        tools = [tool("search", self.searcher.search_description(self.args.top_k), "query")]
        if self.args.include_get_document:
            tools.append(tool("get_document", self.searcher.get_document_description(), "docid"))
        return tools

    @property
    def functions(self) -> dict[str, ToolFunction]:
        offered = {"search": self.search, "get_document": self.get_document}
        return {schema["function"]["name"]: offered[schema["function"]["name"]] for schema in self.tools}

    def messages(self) -> Messages:
        question = USER_PROMPT.format(question=self.user_prompt)
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]

    def search(self, query: str) -> str:
        self.used["search"] += 1
        results = []
        for found in self.searcher.search(query, self.args.top_k):
            words = str(found["text"]).split()
            limit = self.args.snippet_max_tokens
            snippet = " ".join(words[:limit]) if limit and len(words) > limit else str(found["text"])
            score = {"score": found["score"]} if found.get("score") is not None else {}
            results.append({"docid": found["docid"], **score, "snippet": snippet})
        return cut(json.dumps(results, indent=2))

    def get_document(self, docid: str) -> str:
        self.used["get_document"] += 1
        document = self.searcher.get_document(docid)
        return cut(
            json.dumps(document if document is not None else {"error": f"Document with docid '{docid}' not found"})
        )

    async def grade(self, turns: list[Experience], prompt: str | None) -> dict[str, float]:
        final = turns[-1].info["response_text"]
        if parse_tool_calls(final) or not final.strip():
            return {"accuracy": 0.0}  # out of iterations in mid-search, or nothing said
        if not self.auxiliary_models:
            raise LookupError(
                "bcp_simple_react_workflow judges answers with explorer.auxiliary_models[0], and there is none"
            )
        request = JUDGE_PROMPT.format(question=self.user_prompt, truth=self.truth, response=final)
        messages = [
            {"role": "system", "content": "You are a precise evaluator. Always respond with valid JSON as requested."},
            {"role": "user", "content": request},
        ]
        (verdict,) = await self.auxiliary_models[0].chat_async(messages, n=1)
        return {"accuracy": float(parse_verdict(verdict.info["response_text"]))}

    async def experiences(
        self, messages: Messages, turns: list[Experience], components: dict[str, float]
    ) -> list[Experience]:
        experiences = await super().experiences(messages, turns, components)
        metrics = {
            "conversation_turns": float(len(messages)),
            "total_tool_calls": float(self.calls),
            "search_calls": float(self.used["search"]),
            "get_document_calls": float(self.used["get_document"]),
        }
        for experience in experiences:
            experience.metrics.update(metrics)
        return [e for e in experiences if len(e.tokens) <= self.args.max_model_tokens]

"""Tool calling: OpenAI-style tool schemas in, Hermes-style ``<tool_call>`` blocks out.

The task's tool schemas reach the model through the rollout engine's chat template (or its system
prompt: ``trinity.model.tokenization``); it calls a tool by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (``parse_tool_calls``). A call runs the
registered Python function in a thread with a timeout; its result or error goes back as a ``tool``
message, so a bad call is a turn the model learns from, never a crash. Register tools with
``@register_tool`` or ``workflow_args.tool_functions``; a parameter named ``task`` receives the
current ``Task`` (its row is ``task.raw``), never an argument of the model's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from trinity.plugin_api import Task, ToolCall, import_target, tool_schemas
from trinity.plugin_api import parse_hermes_tool_calls as parse_tool_calls
from trinity_workflows.arithmetic import evaluate

ToolFunction = Callable[..., Any]
TOOLS: dict[str, ToolFunction] = {}
"""Tools any ``tool_call_workflow`` task may name in its schemas."""

__all__ = ["TOOLS", "ToolCall", "execute", "parse_tool_calls", "register_tool", "resolve_tools", "tool_schemas"]


def register_tool(function: ToolFunction | None = None, *, name: str | None = None) -> Any:
    """Decorator: make ``function`` callable by models as ``name`` (default: its own name)."""

    def add(fn: ToolFunction) -> ToolFunction:
        TOOLS[name or fn.__name__] = fn
        return fn

    return add(function) if function is not None else add


@register_tool
def calculator(expression: str) -> float:
    """Evaluate an arithmetic expression of numbers, + - * / and parentheses."""
    return evaluate(expression)[0]


def resolve_tools(schemas: list[dict[str, Any]], paths: Mapping[str, str]) -> dict[str, ToolFunction]:
    """The function behind every schema: ``paths`` (``workflow_args.tool_functions``) first,
    then ``TOOLS``. A schema without a function is a configuration error."""
    functions = {}
    for schema in schemas:
        name = schema["function"]["name"]
        if name in paths:
            functions[name] = import_target(paths[name])
        elif name in TOOLS:
            functions[name] = TOOLS[name]
        else:
            raise LookupError(
                f"no function for tool '{name}': register one with trinity_workflows.tools.register_tool "
                f"or map it in workflow_args.tool_functions (registered: {', '.join(sorted(TOOLS)) or 'none'})"
            )
    return functions


async def execute(
    call: ToolCall, functions: Mapping[str, ToolFunction], timeout: float, task: Task | None = None
) -> tuple[str, bool]:
    """Run one call: the text that goes back to the model (the result, or ``error: ...``)
    and whether the call succeeded. A function with a ``task`` parameter gets ``task``.

    A call that times out is abandoned: its (daemon) thread cannot be killed and runs to
    its end in the background without holding up the workflow, the event loop's executor
    or interpreter exit; tools should still bound their own work.
    """
    if call.error:
        return f"error: {call.error}", False
    function = functions.get(call.name)
    if function is None:
        return f"error: unknown tool '{call.name}' (available: {', '.join(sorted(functions))})", False
    arguments = dict(call.arguments or {})
    if _takes_task(function):
        if "task" in arguments:
            return f"error: TypeError: {call.name}() got an unexpected keyword argument 'task'", False
        arguments["task"] = task
    try:
        result = await asyncio.wait_for(_in_daemon_thread(function, arguments), timeout)
    except asyncio.TimeoutError:
        return f"error: tool '{call.name}' timed out after {timeout:g} s", False
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}", False
    return (result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)), True


@functools.cache
def _takes_task(function: ToolFunction) -> bool:
    """Whether ``function`` wants the task: a parameter named ``task``."""
    return "task" in inspect.signature(function).parameters


def _in_daemon_thread(function: ToolFunction, arguments: Mapping[str, Any]) -> asyncio.Future:
    """``function(**arguments)`` on a thread of its own; the future gets its result or error."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(outcome: Any, failed: bool) -> None:
        if not future.done():  # not cancelled by a timeout meanwhile
            future.set_exception(outcome) if failed else future.set_result(outcome)

    def target() -> None:
        try:
            outcome, failed = function(**arguments), False
        except Exception as exc:
            outcome, failed = exc, True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, outcome, failed)

    threading.Thread(target=target, name="trinity-tool", daemon=True).start()
    return future

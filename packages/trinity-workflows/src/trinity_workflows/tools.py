"""Tool calling: OpenAI-style tool schemas in, Hermes-style ``<tool_call>`` blocks out.

The model sees the task's tool schemas in its system prompt (the format Qwen2.5 and
Hermes chat templates render) and calls a tool by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. A call runs the Python
function registered under that name, in a thread, with a timeout; its result (or the
error: unknown tool, malformed call, bad arguments, timeout, exception) goes back to the
model as a ``tool`` message, so a bad call is a turn the model learns from, never a crash.

Register tools with ``@register_tool`` in a module the workflow imports, or point
``workflow_args.tool_functions`` at them (``{"name": "package.module:function"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trinity.plugin_api import import_target
from trinity_workflows.arithmetic import evaluate

ToolFunction = Callable[..., Any]
TOOLS: dict[str, ToolFunction] = {}
"""Tools any ``tool_call_workflow`` task may name in its schemas."""

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{schemas}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


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


@dataclass
class ToolCall:
    """One ``<tool_call>`` block: the call, or why it could not be read (``error``)."""

    name: str = ""
    arguments: Mapping[str, Any] | None = None
    error: str | None = None


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of ``text``, in order; malformed ones carry an ``error``."""
    calls = []
    for block in _TOOL_CALL.findall(text):
        try:
            payload = json.loads(block)
        except json.JSONDecodeError as exc:
            calls.append(ToolCall(error=f"the tool call is not valid JSON ({exc.msg})"))
            continue
        name = payload.get("name") if isinstance(payload, dict) else None
        arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
        if isinstance(arguments, str):  # some models JSON-encode the arguments twice
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            calls.append(ToolCall(error='a tool call needs {"name": <string>, "arguments": <object>}'))
        else:
            calls.append(ToolCall(name=name, arguments=arguments))
    return calls


def tool_schemas(raw: Any) -> list[dict[str, Any]]:
    """The task's tool schemas: a list of OpenAI tool dicts, or its JSON text."""
    schemas = json.loads(raw) if isinstance(raw, str) else list(raw or [])
    return [s if "function" in s else {"type": "function", "function": s} for s in schemas]


def tools_prompt(schemas: list[dict[str, Any]]) -> str:
    """The system-prompt section that offers ``schemas`` to the model."""
    return TOOLS_PROMPT.format(schemas="\n".join(json.dumps(s, ensure_ascii=False) for s in schemas))


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


async def execute(call: ToolCall, functions: Mapping[str, ToolFunction], timeout: float) -> tuple[str, bool]:
    """Run one call: the text that goes back to the model (the result, or ``error: ...``)
    and whether the call succeeded.

    A call that times out is abandoned: its (daemon) thread cannot be killed and runs to
    its end in the background without holding up the workflow, the event loop's executor
    or interpreter exit; tools should still bound their own work.
    """
    if call.error:
        return f"error: {call.error}", False
    function = functions.get(call.name)
    if function is None:
        return f"error: unknown tool '{call.name}' (available: {', '.join(sorted(functions))})", False
    try:
        result = await asyncio.wait_for(_in_daemon_thread(function, call.arguments), timeout)
    except asyncio.TimeoutError:
        return f"error: tool '{call.name}' timed out after {timeout:g} s", False
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}", False
    return (result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)), True


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

"""What ``trinity debug`` shows: each task's experiences on the terminal and, with ``--html``, as a page.

A response shows in the spans of its action mask, decoded with the rollout model's tokenizer
(special tokens too: the chat template is part of what a workflow can get wrong). Trained tokens
(mask 1) are in ⟦ ⟧, highlighted on a terminal that shows colour and marked on the page; an engine
without a tokenizer shows token ids. Control characters show escaped (``\\x06``).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

import click

from trinity.common.experience import Experience, Task
from trinity.config.schema import Config
from trinity.explorer.debug import DebugRun, Problem, Scored, TaskResult, run_label, run_name, score_responses

Decode = Callable[[list[int]], str]
Echo = Callable[[str], None]
TRAINED_OPEN, TRAINED_CLOSE = "⟦", "⟧"


def show_workflow(
    config: Config, tasks: list[Task], echo: Echo, progress: Echo, page: Path | None = None
) -> list[Problem]:
    """Start the rollout model, run each task's workflow, print its result as it ends (and
    write them all as a web ``page``); ``progress`` tells what is under way (load, each task)."""
    model = config.explorer.rollout_model
    progress(f"loading the rollout model {model.model_path} ({model.engine_type}) ...")
    started = time.monotonic()
    run = DebugRun(config)
    progress(f"loaded in {time.monotonic() - started:.1f} s")
    view = TextView(echo, decoder(run.tokenizer))
    results = []
    try:
        for number, task in enumerate(tasks, 1):
            progress(f"[{number}/{len(tasks)}] task {task.task_id}: {task.workflow_type}, {task.repeat_times} runs ...")
            results.append(run.run(task))
            view.task(results[-1])
    finally:
        run.close()
    if page is not None:
        page.write_text(html_page(config.name, results, view.decode), encoding="utf-8")
        progress(f"wrote {page}")
    return [problem for result in results for problem in result.problems]


def show_rewards(tasks: list[Task], responses: list[str], echo: Echo) -> list[Problem]:
    """Score ``responses`` (``score_responses``), print each; the failures as problems."""
    view = TextView(echo, decoder(None))
    problems = []
    for scored in score_responses(tasks, responses):
        view.scored(scored)
        if scored.error is not None:
            problems.append(Problem.error(f"task {scored.task.task_id}", scored.error))
    return problems


def decoder(tokenizer: Any | None) -> Decode:
    """Token ids to text with ``tokenizer`` (special tokens kept), or the ids themselves without one."""
    if tokenizer is None:
        return lambda ids: " ".join(map(str, ids))
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def mask_spans(experience: Experience, decode: Decode) -> list[tuple[bool, str]]:
    """The response as ``(trained, text)`` runs of equal action-mask values (no mask: all trained)."""
    tokens = experience.response_tokens.tolist()
    mask = experience.action_mask
    trained = [True] * len(tokens) if mask is None else [bool(m) for m in mask.tolist()]
    return [(on, decode([t for _, t in run])) for on, run in groupby(zip(trained, tokens, strict=True), itemgetter(0))]


def printable(text: str) -> str:
    """``text`` with control characters other than newline and tab escaped."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def task_title(result: TaskResult) -> str:
    task, failed = result.task, len(result.errors)
    runs = f"{len(result.experiences)} experiences" + (f", {failed} failed runs" if failed else "")
    return f"task {task.task_id} · {task.workflow_type} · {runs} in {result.seconds:.1f} s"


def headline(experience: Experience) -> str:
    """``run 0 · reward 1 (accuracy 1) · 6 response tokens, 6 trained · response_truncated``."""
    reward = "no reward" if experience.reward is None else f"reward {experience.reward:g}"
    if experience.metrics:
        reward += f" ({', '.join(f'{k} {v:g}' for k, v in experience.metrics.items())})"
    mask = experience.action_mask
    trained = experience.response_length if mask is None else int(mask.sum())
    count = experience.response_length
    tokens = f"{count} response token{'s' if count != 1 else ''}, {trained} trained"
    status = f" · {experience.truncate_status}" if experience.truncate_status else ""
    return f"{run_label(experience)} · {reward} · {tokens}{status}"


def task_parts(result: TaskResult) -> Iterator[tuple[str, Any]]:
    """A task's view in order: ``("prompt", ids)`` where it changes, ``("experience", e)`` and its
    ``("problem", p)``s, each failed run's ``("error", traceback)``, then the task's other problems."""
    shown: list[int] | None = None
    mine = set()
    for experience in result.experiences:
        prompt = experience.prompt_tokens.tolist()
        if prompt != shown:
            shown = prompt
            yield "prompt", prompt
        yield "experience", experience
        for problem in result.problems:
            if problem.where == run_name(experience):
                mine.add(problem)
                yield "problem", problem
    for error in result.errors:
        yield "error", error
    for problem in result.problems:
        if problem not in mine:
            yield "problem", problem


class TextView:
    """Prints results as they come, through ``echo`` (click's: colour on a terminal only)."""

    def __init__(self, echo: Callable[[str], None], decode: Decode):
        self.echo = echo
        self.decode = decode

    def task(self, result: TaskResult) -> None:
        self.echo(click.style(task_title(result), bold=True))
        for kind, part in task_parts(result):
            if kind == "prompt":
                self.echo(f"  prompt · {len(part)} tokens")
                self._block(printable(self.decode(part)))
            elif kind == "experience":
                self.echo(f"  {headline(part)}")
                self._block(self._marked(part))
            elif kind == "error":
                self.echo(click.style("  failed run:", fg="red"))
                self._block(part.rstrip())
            else:
                self.echo(click.style(f"  ! {part.kind}: {part.detail}", fg="yellow"))

    def scored(self, scored: Scored) -> None:
        """A ``--module reward`` line: the task, its truth, the response and its reward."""
        task = scored.task
        self.echo(click.style(f"task {task.task_id} · {scored.reward_fn} · truth {scored.truth!r}", bold=True))
        if scored.error is not None:
            self.echo(click.style(f"  {scored.response!r} failed:", fg="red"))
            self._block(scored.error.rstrip())
            return
        components = ", ".join(f"{k} {v:g}" for k, v in scored.components.items())
        self.echo(f"  {scored.response!r} → reward {sum(scored.components.values()):g} ({components})")

    def _marked(self, experience: Experience) -> str:
        """The response with its trained spans in ⟦ ⟧ and highlighted, the rest dimmed."""
        parts = []
        for trained, text in mask_spans(experience, self.decode):
            text = printable(text)
            if trained:
                parts.append(_styled(f"{TRAINED_OPEN}{text}{TRAINED_CLOSE}", fg="green", bold=True))
            else:
                parts.append(_styled(text, dim=True))
        return "".join(parts)

    def _block(self, text: str) -> None:
        for line in text.split("\n"):
            self.echo(f"    │{line}")


def _styled(text: str, **style: Any) -> str:
    """``click.style`` line by line, so that the block's margin stays unstyled."""
    return "\n".join(click.style(line, **style) if line else line for line in text.split("\n"))


def html_page(title: str, results: list[TaskResult], decode: Decode) -> str:
    """The results as one page: the first problem on top, then each task's prompts and runs."""
    problems = [problem for result in results for problem in result.problems]
    verdict = problem_summary(problems)
    body = [
        f"<h1>trinity debug: {html.escape(title)}</h1>",
        f"<p class='{'problem' if problems else 'ok'}'>{html.escape(verdict)}</p>",
        "<p class='legend'>response tokens: <mark>trained</mark> (action mask 1), not trained</p>",
    ]
    for result in results:
        body.append(f"<section><h2>{html.escape(task_title(result))}</h2>")
        body += [_html_part(kind, part, decode) for kind, part in task_parts(result)]
        body.append("</section>")
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>trinity debug: {html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def _html_part(kind: str, part: Any, decode: Decode) -> str:
    if kind == "prompt":
        return f"<h3>prompt · {len(part)} tokens</h3><pre>{html.escape(printable(decode(part)))}</pre>"
    if kind == "experience":
        spans = "".join(
            f"<mark>{html.escape(printable(text))}</mark>" if trained else html.escape(printable(text))
            for trained, text in mask_spans(part, decode)
        )
        return f"<h3>{html.escape(headline(part))}</h3><pre class='response'>{spans}</pre>"
    if kind == "error":
        return f"<h3>failed run</h3><pre class='error'>{html.escape(part)}</pre>"
    return f"<p class='problem'>{html.escape(f'{part.kind}: {part.detail}')}</p>"


def problem_summary(problems: list[Problem]) -> str:
    """The first problem seen, and how many more of each kind."""
    if not problems:
        return "no problem seen"
    kinds: dict[str, int] = {}
    for problem in problems[1:]:
        kinds[problem.kind] = kinds.get(problem.kind, 0) + 1
    more = f" ({', '.join(f'{n} more {kind}' for kind, n in kinds.items())})" if kinds else ""
    return f"first problem: {problems[0]}{more}"


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1400px; color: #1d2330; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; border-bottom: 1px solid #dde1e8; padding-bottom: .2em; }
h3 { font-size: 1em; font-weight: 600; margin: 1em 0 .3em; } pre { background: #f6f7f9; padding: .6em 1em;
white-space: pre-wrap; } mark { background: #c9f2d0; } .problem { color: #a4530b; } .ok { color: #2e7d32; }
pre.error { color: #b3261e; }
"""

"""Tasksets: dataset rows read in batches of tasks for the explorer, resumably.

``load_rows`` reads a ``storage_type: file`` dataset: a ``.jsonl`` file (parsed here, so errors
name the file and 1-based line), a ``.json``/``.parquet``/``.csv``/``.arrow`` file, a Hugging Face
folder (``subset_name``, ``split``) or ``save_to_disk`` folder, or a hub id. ``TasksetReader``
checks every row against the ``format`` once at start, then serves ``batch_size`` tasks per
``read_batch`` in the selector's order until ``total_epochs`` or ``total_steps``; its
``state_dict`` goes in the explorer's checkpoint meta, so a resumed run continues at the next row.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from trinity.buffer.errors import BadDataError, EndOfTaskset
from trinity.buffer.selector import Selector
from trinity.common.experience import Task
from trinity.common.files import DATA_FILE_BUILDERS
from trinity.config.schema import FormatConfig, StorageConfig, TasksetConfig
from trinity.plugins import Kind, PluginError, resolve

logger = logging.getLogger(__name__)

_BUILDERS = {suffix: builder for suffix, builder in DATA_FILE_BUILDERS.items() if suffix != ".jsonl"}


def _read_jsonl(path: str, skip_bad_rows: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows of a jsonl file and their 1-based line numbers (blank lines ignored)."""
    rows, numbers, skipped = [], [], 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
                if not isinstance(row, dict):
                    raise ValueError(f"a row must be a JSON object, got {type(row).__name__}")
            except (UnicodeDecodeError, ValueError) as exc:
                if not skip_bad_rows:
                    raise BadDataError(path, number, f"{type(exc).__name__}: {exc}") from exc
                skipped += 1
                continue
            rows.append(row)
            numbers.append(number)
    if skipped:
        logger.warning("%s: skipped %d undecodable row(s) (format.skip_bad_rows)", path, skipped)
    return rows, numbers


def load_rows(storage: StorageConfig) -> Sequence[dict[str, Any]]:
    """The rows of a ``file`` taskset or dataset (a list or a ``datasets.Dataset``)."""
    return _load(storage)[0]


def _load(storage: StorageConfig) -> tuple[Sequence[dict[str, Any]], list[int] | None]:
    """Rows and, for jsonl, their line numbers (else row ``i`` is row ``i + 1`` of the data)."""
    path = storage.path
    if not path:
        raise ValueError(f"taskset {storage.name!r}: storage_type file needs a path")
    if os.path.isfile(path) and path.endswith(".jsonl"):
        return _read_jsonl(path, storage.format.skip_bad_rows)
    import datasets

    shown = datasets.is_progress_bar_enabled()
    (datasets.enable_progress_bars if storage.enable_progress_bar else datasets.disable_progress_bars)()
    try:
        if os.path.isfile(path):
            suffix = os.path.splitext(path)[1]
            if suffix not in _BUILDERS:
                raise BadDataError(path, None, f"unknown file type {suffix!r}: use .jsonl, {', '.join(_BUILDERS)}")
            return datasets.load_dataset(_BUILDERS[suffix], data_files=path, split="train"), None
        if os.path.isfile(os.path.join(path, "dataset_dict.json")) or os.path.isfile(os.path.join(path, "state.json")):
            data = datasets.load_from_disk(path)
            return (data[storage.split] if isinstance(data, datasets.DatasetDict) else data), None
        return datasets.load_dataset(path, name=storage.subset_name, split=storage.split), None
    except BadDataError:
        raise
    except Exception as exc:  # datasets wraps parse errors in its own types: name the file
        cause = exc.__cause__ or exc
        raise BadDataError(path, None, f"cannot load ({type(cause).__name__}: {cause})") from exc
    finally:  # the process's setting as it was
        (datasets.enable_progress_bars if shown else datasets.disable_progress_bars)()


def _reads_prompt(workflow: str | None) -> bool:
    """Whether ``workflow`` needs the row's prompt column (environment workflows such as
    FrozenLake build theirs from other columns); unknown names are the config check's to report."""
    try:
        return bool(getattr(resolve(Kind.WORKFLOW, workflow), "reads_prompt", True)) if workflow else True
    except PluginError:
        return True


def _row_problem(row: dict[str, Any], fmt: FormatConfig, reads_prompt: bool = True) -> str | None:
    """Why ``row`` cannot make a task under ``fmt`` for a workflow that does or does not
    ``reads_prompt``, or None."""
    if fmt.prompt_type == "messages":
        messages = row.get(fmt.messages_key)
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            return f"column {fmt.messages_key!r} (messages_key) must be a list of messages with a role"
    elif fmt.prompt_type in (None, "plaintext"):  # tasksets default to plaintext
        if row.get(fmt.prompt_key) is None:
            if not reads_prompt:
                return None
            return f"no prompt: column {fmt.prompt_key!r} (prompt_key) is missing or null; columns: {sorted(row)}"
        if not isinstance(row[fmt.prompt_key], str):
            return f"column {fmt.prompt_key!r} (prompt_key) must be text, got {type(row[fmt.prompt_key]).__name__}"
    else:
        return f"unknown format.prompt_type {fmt.prompt_type!r} (plaintext or messages)"
    for key in (fmt.workflow_key, fmt.reward_fn_key):
        if key and row.get(key) is not None and not isinstance(row[key], str):
            return f"column {key!r} must name a workflow or reward function, got {row[key]!r}"
    return None


class TasksetReader:
    """Batches of ``Task`` from a taskset (see the module docstring)."""

    def __init__(self, storage: TasksetConfig):
        if storage.storage_type != "file":
            raise ValueError(f"taskset {storage.name!r}: storage_type {storage.storage_type!r}; tasksets read files")
        self.storage = storage
        default = storage.default_eval_workflow_type if storage.is_eval else None
        self._workflow = default or storage.default_workflow_type
        rows, numbers = _load(storage)
        self.rows = self._checked(rows, numbers)
        self.batch_size = storage.batch_size or 1
        self.total_steps = None if storage.is_eval else storage.total_steps
        self.total_epochs = 1 if storage.is_eval else (storage.total_epochs or 1)
        selector_type = "sequential" if storage.is_eval else storage.data_selector.selector_type
        selector_cls = resolve(Kind.TASK_SELECTOR, selector_type, f"{storage.name}.data_selector.selector_type")
        try:
            self.selector: Selector = selector_cls(self.rows, storage.data_selector)
        except ValueError as exc:
            raise BadDataError(str(storage.path), None, str(exc)) from exc
        self.epoch = self.index = self.steps = 0
        fmt = storage.format
        self._format = fmt.model_dump()
        self._rollout_args = {k: v for k, v in storage.rollout_args.model_dump().items() if v is not None}

    def _checked(self, rows: Sequence[dict[str, Any]], numbers: list[int] | None) -> list[dict[str, Any]]:
        """The rows that fit the format (``numbers``: their 1-based rows in the file)."""
        numbers = numbers or list(range(1, len(rows) + 1))
        kept, skipped, fmt = [], 0, self.storage.format
        reads_prompt = {self._workflow: _reads_prompt(self._workflow)}
        for row, number in zip(rows, numbers, strict=True):
            workflow = (fmt.workflow_key and row.get(fmt.workflow_key)) or self._workflow
            if workflow not in reads_prompt:
                reads_prompt[workflow] = _reads_prompt(workflow)
            problem = _row_problem(row, fmt, reads_prompt[workflow])
            if problem is None:
                kept.append(row)
            elif self.storage.format.skip_bad_rows:
                skipped += 1
            else:
                raise BadDataError(str(self.storage.path), number, problem)
        if skipped:
            logger.warning("%s: skipped %d row(s) that do not fit the format", self.storage.path, skipped)
        self.skipped = skipped
        if not kept:
            raise BadDataError(str(self.storage.path), None, "no usable rows")
        return kept

    def __len__(self) -> int:
        return len(self.rows)

    def planned_steps(self) -> int:
        """``total_steps``, else the batches of all epochs (batches run across epoch ends)."""
        if self.total_steps is not None:
            return self.total_steps
        return -(-len(self.rows) * self.total_epochs // self.batch_size)

    def _task(self, position: int) -> Task:
        row, fmt = self.rows[position], self.storage.format
        return Task(
            workflow_type=(fmt.workflow_key and row.get(fmt.workflow_key)) or self._workflow,
            reward_fn_type=(fmt.reward_fn_key and row.get(fmt.reward_fn_key)) or self.storage.default_reward_fn_type,
            raw=row,
            workflow_args=dict(self.storage.workflow_args),
            reward_fn_args=dict(self.storage.reward_fn_args),
            rollout_args=dict(self._rollout_args),
            format=dict(self._format),
            repeat_times=self.storage.repeat_times or 1,
            taskset_name=self.storage.name,
            index=position,  # among the usable rows
            is_eval=self.storage.is_eval,
        )

    def read_batch(self, refill: bool = False) -> list[Task]:
        """The next ``batch_size`` tasks (the last batch of the data may be short). A ``refill``
        batch belongs to the step already read (the explorer's dynamic sampling): it does not
        count towards ``total_steps``."""
        if not refill and self.total_steps is not None and self.steps >= self.total_steps:
            raise EndOfTaskset(f"taskset {self.storage.name!r}: total_steps {self.total_steps} reached")
        batch: list[Task] = []
        while len(batch) < self.batch_size:
            if self.index >= len(self.rows):
                if self.total_steps is None and self.epoch + 1 >= self.total_epochs:
                    break
                self.epoch, self.index = self.epoch + 1, 0
            positions = self.selector.select(self.epoch, self.index, self.batch_size - len(batch))
            batch += [self._task(p) for p in positions]
            self.index += len(positions)
        if not batch:
            raise EndOfTaskset(f"taskset {self.storage.name!r}: {self.total_epochs} epoch(s) done")
        self.steps += not refill
        return batch

    def update_pass_rates(self, task_indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        """Observed pass rates of tasks (by ``Task.index``), for the curriculum selectors."""
        self.selector.update(task_indices, pass_rates)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "steps": self.steps, "selector": self.selector.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index, self.steps = state["epoch"], state["index"], state["steps"]
        self.selector.load_state_dict(state.get("selector", {}))

"""``intercode_sql_workflow``: answer a question about a database by running SQL (InterCode-SQL).

The model writes one statement per turn in ``<action>...</action>``, sees its result and ends with
``<action>submit</action>`` (submitted for it at ``max_env_steps`` with ``auto_submit``); the last
result is scored against the gold query's by InterCode's reward (row-multiset IoU times the Kendall
rank correlation). InterCode runs MySQL in Docker; here each database is a sqlite file opened
read-only, with a time limit per statement. Records (``query``, ``gold``, ``db``) come from
``workflow_args.data_path`` or the row itself. Rules and layout: the package README.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from trinity.plugin_api import Field, inert
from trinity_workflows.conversation import MultiTurnWorkflow
from trinity_workflows.envs.base import EnvArgs, EnvironmentWorkflow, EpisodeRecord

SQL_PROMPT = """You are an agent answering a natural-language question about a database by running SQL \
commands on it (SQLite).

Each step, reason briefly, then give exactly one action: wrap your reasoning in <think></think> and \
the action in <action></action>. The action is either one SQL statement to run, or submit when the \
latest result answers the question.

Examples:
<think>I should look at the relevant rows.</think><action>SELECT * FROM singer LIMIT 5;</action>
<think>The latest result answers the question.</think><action>submit</action>

Do not ask the user for help; finish the task yourself."""

logger = logging.getLogger(__name__)
INVALID_ACTION = "Invalid action. Wrap one SQL statement or submit with <action></action>."
DATABASES_NEEDED = "the folder of the sqlite databases (InterCode's MySQL in Docker is not used here)"


class InterCodeSQLArgs(EnvArgs):
    """``workflow_args`` of ``intercode_sql_workflow`` (Trinity-RFT's, plus ``db_dir``)."""

    max_env_steps: int = Field(10, ge=1, description="most model actions per episode")
    data_path: str | None = Field(None, description="InterCode records (JSON list or JSONL); else the row is one")
    db_dir: str | None = Field(None, description="folder of the sqlite databases (<db>/<db>.sqlite or <db>.sqlite)")
    auto_submit: bool = Field(True, description="submit for the model when max_env_steps run out")
    query_timeout: float = Field(5.0, gt=0, description="seconds one SQL statement may run")
    image_name: str = inert(
        "docker-env-sql",
        "InterCode's MySQL Docker image",
        reason="InterCode starts this Docker image to serve the tasks' databases from MySQL; here they are local "
        "sqlite files (db_dir) and no container is started",
    )
    verbose: bool = Field(False, description="log each action, its result and the reward (InterCode's debug log)")


def iou_reward(agent: Any, gold: list[tuple]) -> float:
    """InterCode-SQL's reward of the submitted result ``agent`` (rows, or an error text) against
    the gold rows."""
    if not isinstance(agent, list):
        return 0.0
    mine, theirs = [str(row) for row in agent], [str(row) for row in gold]
    union = Counter(mine) | Counter(theirs)
    if not union:
        return 1.0
    shared = Counter(mine) & Counter(theirs)
    reward = sum(shared.values()) / sum(union.values())
    if shared:
        tau = kendall_tau_b(_in_shared(mine, shared), _in_shared(theirs, shared))
        if not math.isnan(tau):
            reward = round(tau * reward, 2)
    return reward


def _in_shared(rows: list[str], shared: Counter) -> list[str]:
    """The rows of ``rows`` that are in ``shared``, in order, each as often as it is shared."""
    left, kept = shared.copy(), []
    for row in rows:
        if left[row] > 0:
            left[row] -= 1
            kept.append(row)
    return kept


def kendall_tau_b(x: list[str], y: list[str]) -> float:
    """Kendall's tau-b of two equally long sequences (compared by value, ties allowed); NaN when
    either is constant, as ``scipy.stats.kendalltau``."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else math.nan


class SqlEpisode:
    """One InterCode-SQL episode on a read-only sqlite database."""

    def __init__(self, record: dict[str, Any], database: Path, args: InterCodeSQLArgs):
        self.record, self.step_limit, self.auto_submit = record, args.max_env_steps, args.auto_submit
        self.timeout, self.verbose = args.query_timeout, args.verbose
        self.connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, check_same_thread=False)
        self.steps, self.result = 0, None

    def reset(self) -> str:
        self.steps, self.result = 0, None
        return str(self.record["query"])

    def step(self, action: str) -> tuple[str, float, bool]:
        self.steps += 1
        if action == "submit":
            outcome = str(self.result), self.reward(), True
        else:
            if action:
                self.result = self.run(action)
            observation = str(self.result) if action else INVALID_ACTION
            submit = self.steps >= self.step_limit and self.auto_submit
            outcome = (observation, self.reward(), True) if submit else (observation, 0.0, False)
        if self.verbose:
            logger.info(
                "InterCode-SQL %r step %d: %r -> %.200s (reward %s)",
                self.record["query"],
                self.steps,
                action,
                *outcome[:2],
            )
        return outcome

    def run(self, sql: str) -> Any:
        """The rows of ``sql`` (None for a statement that returns none), or the error's text."""
        deadline = time.monotonic() + self.timeout
        self.connection.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
        try:
            cursor = self.connection.execute(sql)
            return cursor.fetchall() if cursor.description is not None else None
        except (sqlite3.Error, ValueError) as exc:
            reason = "the statement ran past its time limit" if "interrupted" in str(exc) else str(exc)
            return f"Error executing query: {reason}"

    def reward(self) -> float:
        gold = self.run(self.record["gold"])
        if not isinstance(gold, list):
            raise ValueError(f"the gold query of {self.record['query']!r} fails: {gold}")
        return iou_reward(self.result, gold)

    def close(self) -> None:
        self.connection.close()


@functools.lru_cache(maxsize=8)
def _records(path: str) -> list[dict[str, Any]]:
    text = Path(path).read_text()
    if path.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


class InterCodeSQLWorkflow(EnvironmentWorkflow, MultiTurnWorkflow):
    """An InterCode-SQL episode as one multi-turn experience (see the module doc)."""

    Args: ClassVar[type[EnvArgs]] = InterCodeSQLArgs
    env_system_prompt = SQL_PROMPT

    @functools.cached_property
    def record(self) -> dict[str, Any]:
        args = self.args
        if args.data_path is None:
            record = self.task.raw
        else:
            records = _records(str(Path(args.data_path).expanduser()))
            index = int(self.task_desc)
            if not 0 <= index < len(records):
                raise IndexError(f"query_idx {index} is outside {args.data_path} ({len(records)} records)")
            record = records[index]
        missing = {"query", "gold", "db"} - set(record)
        if missing:
            where = f"record {self.task_desc} of {args.data_path}" if args.data_path else "the row"
            raise ValueError(f"{where} lacks {sorted(missing)} (InterCode-SQL records have query, gold, db)")
        return record

    def database(self) -> Path:
        db, db_dir = str(self.record["db"]), self.args.db_dir
        if db_dir is None:
            raise ValueError(f"set workflow_args.db_dir: {DATABASES_NEEDED}")
        for candidate in (Path(db_dir) / db / f"{db}.sqlite", Path(db_dir) / f"{db}.sqlite"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"no database {db}: neither {db_dir}/{db}/{db}.sqlite nor {db_dir}/{db}.sqlite")

    def open_episode(self) -> SqlEpisode:
        return SqlEpisode(self.record, self.database(), self.args)

    def format_observation(self, observation: str) -> str:
        return f"Question: {self.record['query']}\nDatabase: {self.record['db']}\nObservation: {observation}"

    def episode_reward(self, record: EpisodeRecord) -> float:
        return record.rewards[-1] if record.done else 0.0

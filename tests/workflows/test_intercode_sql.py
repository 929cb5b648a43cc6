"""intercode_sql_workflow: a real sqlite database generated here, InterCode's reward, the tiny model
and a scripted policy."""

from __future__ import annotations

import json
import math
import sqlite3
import time

import pytest
from scripted_policy import scripted_workflow

from trinity_workflows.base import WorkflowError
from trinity_workflows.envs.intercode_sql import (
    INVALID_ACTION,
    InterCodeSQLArgs,
    SqlEpisode,
    iou_reward,
    kendall_tau_b,
)

SINGERS = [("Ann", "FR", 30), ("Bob", "US", 41), ("Cid", "US", 25), ("Dee", "NL", 52)]
RECORD = {
    "query": "Who are the singers from the US?",
    "gold": "SELECT name FROM singer WHERE country = 'US'",
    "db": "music",
}


@pytest.fixture
def db_dir(tmp_path):
    (tmp_path / "music").mkdir()
    with sqlite3.connect(tmp_path / "music" / "music.sqlite") as db:
        db.execute("CREATE TABLE singer (name TEXT, country TEXT, age INTEGER)")
        db.executemany("INSERT INTO singer VALUES (?, ?, ?)", SINGERS)
    return tmp_path


def act(sql: str) -> str:
    return f"<think>...</think><action>{sql}</action>"


@pytest.mark.parametrize(
    ("agent", "gold", "reward"),
    [
        ([("Bob",), ("Cid",)], [("Bob",), ("Cid",)], 1.0),
        ([("Cid",), ("Bob",)], [("Bob",), ("Cid",)], -1.0),  # the right rows in reverse order
        ([("Bob",), ("Ann",)], [("Bob",), ("Cid",)], 1 / 3),  # one row shared: tau undefined, IoU alone
        ([], [], 1.0),
        ("Error executing query: no such table", [("Bob",)], 0.0),
        (None, [("Bob",)], 0.0),
    ],
)
def test_the_reward_is_intercodes_iou_scaled_by_rank_correlation(agent, gold, reward):
    assert iou_reward(agent, gold) == pytest.approx(reward)


@pytest.mark.parametrize(
    ("x", "y", "tau"),  # scipy.stats.kendalltau's values (scipy 1.17), which InterCode calls
    [("abcd", "abdc", 2 / 3), ("aabc", "abbc", 0.8), ("abc", "cba", -1.0), ("aab", "abb", 0.5), ("aa", "ab", math.nan)],
)
def test_kendall_tau_b_is_scipys_with_ties(x, y, tau):
    assert kendall_tau_b(list(x), list(y)) == pytest.approx(tau, nan_ok=True)


def test_the_episode_runs_sql_read_only_and_scores_the_last_result(db_dir):
    episode = SqlEpisode(RECORD, db_dir / "music" / "music.sqlite", InterCodeSQLArgs(max_env_steps=5))
    assert episode.reset() == RECORD["query"]
    assert episode.step("SELECT name FROM singer WHERE age > 40") == ("[('Bob',), ('Dee',)]", 0.0, False)
    observation, _, _ = episode.step("DELETE FROM singer")
    assert observation.startswith("Error executing query: attempt to write a readonly database")
    assert episode.step("") == (INVALID_ACTION, 0.0, False)
    episode.step("SELECT name FROM singer WHERE country = 'US' ORDER BY name")
    assert episode.step("submit")[1:] == (1.0, True)
    episode.close()


def test_a_statement_past_its_time_limit_is_interrupted(db_dir):
    episode = SqlEpisode(RECORD, db_dir / "music" / "music.sqlite", InterCodeSQLArgs(query_timeout=0.2))
    episode.reset()
    started = time.monotonic()
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    assert "time limit" in episode.step(slow)[0] and time.monotonic() - started < 5


def test_the_workflow_submits_the_right_rows_for_reward_1(model, db_dir, caplog):
    replies = [act("SELECT name FROM singer"), act("SELECT name FROM singer WHERE country = 'US'"), act("submit")]
    args = {"db_dir": str(db_dir), "verbose": True}
    workflow, policy = scripted_workflow(
        model, "intercode_sql_workflow", {**RECORD, "prompt": "0"}, replies, workflow_args=args
    )
    caplog.set_level("INFO", logger="trinity_workflows.envs.intercode_sql")
    (experience,) = workflow.run()
    assert experience.reward == 1.0 and experience.metrics["env_steps"] == 3 and experience.metrics["env_done"] == 1
    assert (
        policy.seen[0][1]["content"] == f"Question: {RECORD['query']}\nDatabase: music\nObservation: {RECORD['query']}"
    )
    assert policy.seen[1][-1]["content"].endswith("Observation: [('Ann',), ('Bob',), ('Cid',), ('Dee',)]")
    assert "SQLite" in policy.seen[0][0]["content"] and experience.action_mask.sum() > 0
    assert "step 3: 'submit' -> [('Bob',), ('Cid',)] (reward 1.0)" in caplog.text  # verbose


def test_records_come_from_data_path_by_query_idx_and_run_out_into_an_auto_submit(model, db_dir, tmp_path):
    data = tmp_path / "ic_spider.json"
    data.write_text(json.dumps([{"query": "q", "gold": "SELECT 1", "db": "music"}, RECORD]))
    args = {"db_dir": str(db_dir), "data_path": str(data), "max_env_steps": 2}
    replies = ["no action", act("SELECT name FROM singer WHERE country = 'US' OR age > 50")]
    workflow, _ = scripted_workflow(
        model,
        "intercode_sql_workflow",
        {"query_idx": 1},
        replies,
        workflow_args=args,
        format={"prompt_key": "query_idx"},
    )
    (experience,) = workflow.run()
    assert experience.reward == pytest.approx(round(1.0 * 2 / 3, 2))  # Bob, Cid (in order) of Bob, Cid, Dee
    assert experience.metrics["env_steps"] == 2 and experience.metrics["env_done"] == 1


def test_the_tiny_model_plays_an_episode(make_workflow, db_dir):
    (experience,) = make_workflow(
        "intercode_sql_workflow", RECORD, workflow_args={"db_dir": str(db_dir), "max_env_steps": 2}
    ).run()
    assert experience.reward == 0.0 and experience.metrics["env_steps"] == 2 and experience.action_mask.any()


@pytest.mark.parametrize(
    ("raw", "args", "error"),
    [
        ({"query": "q", "db": "music"}, {}, r"the row lacks \['gold'\]"),
        (RECORD, {"db_dir": None}, "set workflow_args.db_dir"),
        ({**RECORD, "db": "films"}, {}, "no database films"),
    ],
)
def test_bad_records_and_databases_are_named(make_workflow, db_dir, raw, args, error):
    with pytest.raises(WorkflowError, match=error):
        make_workflow("intercode_sql_workflow", raw, workflow_args={"db_dir": str(db_dir), **args}).run()

"""email_search_workflow on a small inbox generated here (ART-E's layout; its Enron database is a
download, so it is the stand-in), driven by a scripted policy and by the tiny model. The judge is
a scripted policy too: the hosted judge model cannot run here."""

from __future__ import annotations

import json

import pytest
from scripted_policy import ScriptedPolicy, scripted_workflow

from trinity_workflows.base import WorkflowError
from trinity_workflows.envs.email_search import Inbox, write_inbox

ME = "kay@corp.com"
EMAILS = [
    {
        "message_id": "<m1>",
        "date": "2001-05-02 09:00:00",
        "subject": "Lunch",
        "from_address": "al@corp.com",
        "to_addresses": [ME],
        "body": "The budget meeting moved to Friday at noon.",
    },
    {
        "message_id": "<m2>",
        "date": "2001-05-03 10:00:00",
        "subject": "Budget",
        "from_address": ME,
        "to_addresses": ["bo@corp.com"],
        "cc_addresses": ["al@corp.com"],
        "body": "Budget draft attached; the meeting is in room 4.",
    },
    {
        "message_id": "<m3>",
        "date": "2001-06-01 08:00:00",
        "subject": "Budget v2",
        "from_address": "al@corp.com",
        "to_addresses": [ME],
        "body": "New budget meeting next month.",
    },
    {
        "message_id": "<m4>",
        "date": "2001-05-02 11:00:00",
        "subject": "Budget",
        "from_address": "al@corp.com",
        "to_addresses": ["zed@corp.com"],
        "body": "Budget meeting for Zed only.",
    },
]
ROW = {
    "id": 1,
    "prompt": "Which room is the budget meeting in?",
    "response": "Room 4",
    "message_ids": ["<m2>"],
    "how_realistic": 0.9,
    "inbox_address": ME,
    "query_date": "2001-05-20",
}


@pytest.fixture
def db_path(tmp_path):
    return str(write_inbox(tmp_path / "inbox.db", EMAILS))


def call(name: str, **arguments) -> str:
    return f"I will use {name}.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


SEARCH = call("search_emails", inbox_address=ME, query_date="2001-05-20", keywords=["budget", "meeting"])


def test_the_inbox_searches_the_users_mail_up_to_a_date_and_reads_recipients(db_path):
    inbox = Inbox(db_path)
    found = inbox.search(ME, ["budget", "meeting"], sent_before="2001-05-21")
    assert [r["message_id"] for r in found] == ["<m2>", "<m1>"]  # newest first; not m3 (later), not m4 (not Kay's)
    assert "<b>" in found[0]["snippet"]
    assert inbox.search(ME, ['room" OR "x']) == []  # keywords are quoted, never FTS syntax
    email = inbox.read("<m2>")
    assert email["to_addresses"] == ["bo@corp.com"] and email["cc_addresses"] == ["al@corp.com"]
    assert inbox.read("<nope>") is None


def test_a_right_answer_citing_the_right_email_earns_the_full_rubric(model, db_path):
    replies = [
        SEARCH,
        call("read_email", message_id="<m2>"),
        call("generate_response", answer="Room 4", sources=["<m2>"]),
    ]
    judge = ScriptedPolicy(model, ["true"])
    workflow, policy = scripted_workflow(
        model, "email_search_workflow", ROW, replies, auxiliary_models=[judge], workflow_args={"db_path": db_path}
    )
    experiences = workflow.run()
    assert [e.eid.step for e in experiences] == [0, 1, 2]
    format_score = 1 + 0.3 + 0.1 / 1 + 0.1 * (1 - 3 / 10)
    for experience in experiences:
        assert experience.reward == pytest.approx(1.0 + format_score)
        assert experience.metrics["accuracy"] == 1.0 and experience.metrics["actual_turns"] == 3
    assert experiences[0].metrics["tool_calls"] == 2 and experiences[0].metrics["tool_errors"] == 0
    assert "Today's date is 2001-05-20" in policy.seen[0][0]["content"]
    tool_turns = [m for m in policy.seen[2] if m["role"] == "tool"]
    assert json.loads(tool_turns[0]["content"])[0]["message_id"] == "<m2>"
    assert json.loads(tool_turns[1]["content"])["body"].startswith("Budget draft")
    (question,) = [m["content"] for m in judge.seen[0] if m["role"] == "user"]
    assert "Reference answer: Room 4" in question and "AI answer: Room 4" in question


def test_a_wrong_answer_keeps_only_partial_credit(model, db_path):
    replies = [SEARCH, call("generate_response", answer="Room 9", sources=["<m1>"])]
    workflow, _ = scripted_workflow(
        model,
        "email_search_workflow",
        ROW,
        replies,
        auxiliary_models=[ScriptedPolicy(model, ["false"])],
        workflow_args={"db_path": db_path},
    )
    experiences = workflow.run()
    assert [e.reward for e in experiences] == pytest.approx([-1.0 + 0.1] * 2)  # found, not read, not cited


def test_without_a_judge_the_answer_is_matched_against_the_reference(model, db_path):
    replies = [call("generate_response", answer="room 4", sources=[])]
    workflow, _ = scripted_workflow(
        model,
        "email_search_workflow",
        ROW,
        replies,
        workflow_args={"db_path": db_path},
        reward_fn_args={"llm_as_a_judge": False},
    )
    assert [e.reward for e in workflow.run()] == [1.0]
    workflow, _ = scripted_workflow(model, "email_search_workflow", ROW, replies[:], workflow_args={"db_path": db_path})
    with pytest.raises(WorkflowError, match="auxiliary_models.*llm_as_a_judge: false"):
        workflow.run()


def test_the_tiny_model_ends_without_an_answer(make_workflow, db_path):
    experiences = make_workflow("email_search_workflow", ROW, workflow_args={"db_path": db_path, "max_turns": 2}).run()
    assert experiences[-1].metrics["format"] == -1.0 and {e.reward for e in experiences} == {-1.0}
    assert len(experiences[0].tokens) > experiences[0].prompt_length


def test_a_row_without_inbox_or_date_is_named(make_workflow, db_path):
    row = {k: v for k, v in ROW.items() if k != "query_date"}
    with pytest.raises(WorkflowError, match=r"the row lacks \['query_date'\]"):
        make_workflow("email_search_workflow", row, workflow_args={"db_path": db_path}).run()

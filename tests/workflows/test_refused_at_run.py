"""What this package refuses at ``trinity run`` (``config check`` warns with the same message):
storage_type env_service (AgentEvolver's Environment Service, an HTTP server hosting AppWorld,
BFCL...; nothing here can serve it), and the paths Trinity-RFT's email-search and InterCode-SQL
examples lack (its inbox path was hard-coded, its SQL databases live in Docker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trinity.config import ConfigError, load_config
from trinity.config.schema import StorageConfig
from trinity.plugins import Kind, resolve
from trinity_workflows.envs.email_search import INBOX_NEEDED
from trinity_workflows.envs.env_service import REFUSAL
from trinity_workflows.envs.intercode_sql import DATABASES_NEEDED

sys.path.insert(0, str(Path(__file__).parents[1] / "config"))
from config_helpers import write  # noqa: E402 -- the config tests' small valid config

JUDGE = "explorer.auxiliary_models=[{model_path: /models/judge, engine_type: transformers}]"
EMAIL = (
    "{name: enron, path: /data/enron, format: {prompt_key: question, response_key: answer}, "
    "workflow_args: {max_turns: 10}, reward_fn_args: {llm_as_a_judge: true}, default_workflow_type: email_search_workflow}"
)
SQL = (
    "{name: dev, path: /data/sql, format: {prompt_key: query_idx}, workflow_args: {data_path: ic_spider_dev.json, "
    "image_name: docker-env-sql, max_env_steps: 10, auto_submit: true, verbose: false}, "
    "default_workflow_type: intercode_sql_workflow}"
)
ENV_SERVICE = (
    "{name: appworld, storage_type: env_service, path: 'http://127.0.0.1:8080', default_workflow_type: math_workflow}"
)


def refused(tmp_path, caplog, taskset: str, eval_taskset: str) -> dict[str, str]:
    """The config checks (each refusal logged as a warning); loading it to run raises the same messages."""
    overrides = [f"buffer.explorer_input.taskset={taskset}", f"buffer.explorer_input.eval_tasksets=[{eval_taskset}]"]
    load_config(write(tmp_path), [*overrides, JUDGE])
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path), [*overrides, JUDGE], run=True)
    found = {issue.path: issue.message for issue in err.value.issues}
    for key, message in found.items():
        assert f"{key}: {message} (trinity run refuses it)" in caplog.text
    return found


def test_env_service_is_known_and_refused_naming_what_it_needs(tmp_path, caplog):
    found = refused(tmp_path, caplog, ENV_SERVICE, SQL.replace("data_path", "db_dir: /dbs, data_path"))
    assert found == {"buffer.explorer_input.tasksets[0].storage_type": REFUSAL}
    assert "unknown" not in REFUSAL and "Environment Service" in REFUSAL
    with pytest.raises(RuntimeError, match="appworld: env_service names an Environment Service"):
        resolve(Kind.BUFFER_STORAGE, "env_service")(StorageConfig(name="appworld", storage_type="env_service"))


def test_trinity_rft_email_and_sql_examples_check_and_need_their_paths_to_run(tmp_path, caplog):
    found = refused(tmp_path, caplog, EMAIL, SQL)
    assert found == {
        "buffer.explorer_input.tasksets[0].workflow_args.db_path": f"required: {INBOX_NEEDED}",
        "buffer.explorer_input.eval_tasksets[0].workflow_args.db_dir": f"required: {DATABASES_NEEDED}",
    }
    with_paths = EMAIL.replace("max_turns: 10", "max_turns: 10, db_path: /data/inbox.db")
    with_dbs = SQL.replace("data_path", "db_dir: /dbs, data_path")
    overrides = [f"buffer.explorer_input.taskset={with_paths}", f"buffer.explorer_input.eval_tasksets=[{with_dbs}]"]
    load_config(write(tmp_path), [*overrides, JUDGE], run=True)

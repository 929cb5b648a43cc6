"""No credential of a config reaches its records: the job's ``config.yaml`` (``record_config``),
``trinity config check``'s output, the check's messages and the config the monitors get
(``setup_role``, read back from MLflow's store).

The fields are found over the whole schema, by type and name: every string field (or strings in
a list field) whose name says URL, path, address or credential gets a credential, and every
mapping field gets credential-named keys and URLs, so a field added later is planted too.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
import types
import typing
from itertools import count
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_helpers import write
from pydantic import BaseModel

from trinity.config import check_tree, load_config, to_yaml
from trinity.config.load import read_yaml
from trinity.config.schema import Config
from trinity.config.secrets import HIDDEN, MASK, mask_secrets, mask_text, secret_name
from trinity.report import CONFIG_FILE, record_config
from trinity.runtime import setup_role

LOCATION_WORDS = {"url", "uri", "dsn", "path", "address", "host", "endpoint", "server", "dir", "root", "inputs"}
"""Words of a field's name that say it may hold a URL (a database path, a server address, input files)."""


def words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower()))


def may_hold_a_credential(name: str) -> bool:
    return secret_name(name) or bool(words(name) & LOCATION_WORDS)


def _shape(annotation: Any) -> tuple[str, Any]:
    """``("model", cls)``, ``("models", cls)`` (a list), ``("model_map", cls)``, ``("str", None)``,
    ``("strs", None)``, ``("map", None)`` (of strings or anything) or ``("other", None)`` of a field's
    annotation."""
    options = [annotation]
    while any(typing.get_origin(o) in (typing.Union, types.UnionType, typing.Annotated) for o in options):
        flat = []
        for option in options:
            origin = typing.get_origin(option)
            if origin is typing.Annotated:
                flat.append(typing.get_args(option)[0])
            elif origin in (typing.Union, types.UnionType):
                flat.extend(typing.get_args(option))
            else:
                flat.append(option)
        options = flat
    for option in options:
        origin, args = typing.get_origin(option), typing.get_args(option)
        if isinstance(option, type) and issubclass(option, BaseModel):
            return "model", option
        if origin is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            return "models", args[0]
        if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            return "model_map", args[1]
    for option in options:
        origin, args = typing.get_origin(option), typing.get_args(option)
        if option is str:
            return "str", None
        if origin is list and args and args[0] is str:
            return "strs", None
        if origin is dict and (not args or args[1] in (Any, str)):
            return "map", (args[1] if args else Any)
    return "other", None


class Planter:
    """Puts a distinct credential into every field of a config that may hold one."""

    def __init__(self) -> None:
        self.numbers = count(1)
        self.secrets: dict[str, list[str]] = {}
        """dotted key -> the secret strings planted there."""

    def _secret(self, key: str, kind: str) -> str:
        value = f"s3cr3t{kind}{next(self.numbers):04d}x"
        self.secrets.setdefault(key, []).append(value)
        return value

    def url(self, key: str) -> str:
        """A database URL with a password and password-like query parameters."""
        return (
            f"postgresql://trinity:{self._secret(key, 'pw')}@db.example:5432/runs"
            f"?sslmode=require&sslpassword={self._secret(key, 'ssl')}&token={self._secret(key, 'tok')}"
            f"&api_key={self._secret(key, 'ak')}&secret={self._secret(key, 'sec')}"
        )

    def value(self, key: str, name: str) -> str:
        return self._secret(key, "cred") if secret_name(name) else self.url(key)

    def mapping(self, key: str, existing: dict[str, Any] | None, values: Any) -> dict[str, Any]:
        """``existing`` and credential-named keys, URLs (and, where values may be anything, a list
        and a nested mapping of them)."""
        planted = dict(existing or {})
        planted.update(
            api_key=self._secret(key, "ak"),
            password=self._secret(key, "pw"),
            OPENAI_API_KEY=self._secret(key, "env"),
            db_url=self.url(key),
        )
        if values is not str:
            planted.update(
                servers=[self.url(key)], nested={"hf_token": self._secret(key, "tok"), "base_url": self.url(key)}
            )
        return planted

    def fill(self, model: BaseModel, path: str = "") -> None:
        for name, field in type(model).model_fields.items():
            key = f"{path}.{name}" if path else name
            shape, cls = _shape(field.annotation)
            current = getattr(model, name)
            if shape == "model":
                current = current if isinstance(current, BaseModel) else cls.model_construct()
                self.fill(current, key)
            elif shape == "models":
                current = list(current or []) or [cls.model_construct()]
                for i, item in enumerate(current):
                    self.fill(item, f"{key}[{i}]")
            elif shape == "model_map":
                current = dict(current or {}) or {"planted": cls.model_construct()}
                for k, item in current.items():
                    self.fill(item, f"{key}.{k}")
            elif shape == "str" and may_hold_a_credential(name):
                current = self.value(key, name)
            elif shape == "strs" and may_hold_a_credential(name):
                current = [self.value(key, name)]
            elif shape == "map":
                current = self.mapping(key, current if isinstance(current, dict) else None, cls)
            else:
                continue
            object.__setattr__(model, name, current)


def leaked(text: str, planter: Planter) -> dict[str, list[str]]:
    return {key: found for key, values in planter.secrets.items() if (found := [v for v in values if v in text])}


@pytest.fixture
def planted(tmp_path) -> tuple[Config, Planter]:
    config = load_config(write(tmp_path))
    planter = Planter()
    planter.fill(config)
    return config, planter


def test_the_schema_walk_plants_every_credential_field(planted):
    config, planter = planted
    keys = set(planter.secrets)
    for key in (
        "explorer.db_url",
        "explorer.rollout_model.api_key",
        "explorer.auxiliary_models[0].api_key",
        "buffer.explorer_input.tasksets[0].path",
        "buffer.trainer_input.experience_buffer.path",
        "buffer.trainer_input.auxiliary_buffers.planted.path",
        "service.data_juicer.server_url",
        "model.tinker.base_url",
        "monitor.monitor_args",
        "explorer.env_vars",
        "buffer.explorer_input.tasksets[0].workflow_args",
        "data_processor.task_pipeline.inputs",
    ):
        assert key in keys, f"{key} is not planted: the walk missed part of the schema"
    assert "model.external_model.api_key_env" not in keys  # the name of a variable, not a key
    assert config.explorer.db_url.startswith("postgresql://trinity:s3cr3tpw")  # the run keeps the value


def test_no_credential_is_in_the_json_form_or_the_written_config_yaml(planted, tmp_path):
    config, planter = planted
    config.checkpoint_job_dir = str(tmp_path / "job")  # the folder record_config writes to
    planter.secrets.pop("checkpoint_job_dir")
    dumped = config.model_dump(mode="json")
    assert not leaked(repr(dumped), planter)
    record_config(config)
    written = (tmp_path / "job" / CONFIG_FILE).read_text()
    assert not leaked(written, planter), leaked(written, planter)
    assert written == to_yaml(config)
    record = yaml.safe_load(written)
    assert record["explorer"]["db_url"].startswith(f"postgresql://trinity:{MASK}@db.example:5432/runs?")
    assert f"sslpassword={MASK}" in record["explorer"]["db_url"] and "sslmode=require" in record["explorer"]["db_url"]
    assert record["explorer"]["rollout_model"]["api_key"] == HIDDEN
    assert record["monitor"]["monitor_args"]["api_key"] == HIDDEN
    assert record["explorer"]["env_vars"]["OPENAI_API_KEY"] == HIDDEN
    assert record["model"]["external_model"]["api_key_env"] == "OPENAI_API_KEY"
    # the values the run uses are untouched
    assert config.explorer.rollout_model.api_key.startswith("s3cr3tcred")


def test_no_credential_reaches_the_monitors(planted, tmp_path):
    """``setup_role`` hands the monitors the config; MLflow's store, read back, holds no credential."""
    pytest.importorskip("trinity_monitors.mlflow")
    from mlflow.tracking import MlflowClient

    config, planter = planted
    config.checkpoint_job_dir = str(tmp_path / "job")
    planter.secrets.pop("checkpoint_job_dir")
    config.monitor.monitor_type = ["mlflow"]
    config.monitor.monitor_args = {}
    planter.secrets.pop("monitor.monitor_args")  # the monitor's own settings, not the config it records
    config.log.level = "INFO"
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        setup_role(config, "trainer", None).close()
    finally:
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    client = MlflowClient(f"sqlite:///{tmp_path}/job/monitor/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name(config.project).experiment_id])
    params = run.data.params
    assert len(params) > 100 and params["explorer.rollout_model.api_key"] == HIDDEN
    assert not leaked(repr(params), planter), leaked(repr(params), planter)


CLI_CREDENTIALS = {
    "explorer.db_url": "postgresql://trinity:clipw01@db.example/runs?sslpassword=clissl01&application_name=t",
    "explorer.rollout_model.api_key": "clikey01",
    "buffer.trainer_input.experience_buffer.path": "postgresql://u:clipw02@db.example/exp?password=cliqpw02",
    "buffer.explorer_input.taskset.path": "https://hf:clipw03@data.example/tasks.jsonl?token=clitok03",
    "buffer.explorer_input.taskset.workflow_args": "{api_key: clikey04, base_url: 'http://u:clipw04@h/v1'}",
    "monitor.monitor_args": "{api_key: clikey05}",
    "explorer.env_vars": "{OPENAI_API_KEY: clikey06, DB: 'host=h user=u password=clipw06'}",
    "model.tinker.base_url": "https://u:clipw07@tinker.example",
}


def test_trinity_config_check_prints_no_credential(tmp_path):
    overrides = [f"{key}={value}" for key, value in CLI_CREDENTIALS.items()]
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "config", "check", str(write(tmp_path)), *overrides],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout + result.stderr
    secrets = re.findall(r"cli(?:pw|ssl|qpw|tok|key)\d\d", " ".join(CLI_CREDENTIALS.values()))
    assert len(secrets) == 13 and not [s for s in secrets if s in printed], printed
    record = yaml.safe_load(result.stdout)
    assert (
        record["explorer"]["db_url"]
        == f"postgresql://trinity:{MASK}@db.example/runs?sslpassword={MASK}&application_name=t"
    )
    assert record["explorer"]["rollout_model"]["api_key"] == HIDDEN


def test_the_check_messages_print_no_credential(tmp_path):
    """A value the check quotes in a message (here a wrong type) is masked too."""
    url = "postgresql://u:msgpw01@h/db?sslpassword=msgssl01"
    _, issues = check_tree(read_yaml(write(tmp_path), [f"buffer.batch_size={url}"]))
    text = "\n".join(str(i) for i in issues.issues + issues.warnings)
    assert "buffer.batch_size" in text and "msgpw01" not in text and "msgssl01" not in text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://u:pw@h/db", f"postgresql://u:{MASK}@h/db"),
        ("mysql://u:p%40ss@h:3306/db?ssl=1", f"mysql://u:{MASK}@h:3306/db?ssl=1"),
        ("redis://:pw@h/0", f"redis://:{MASK}@h/0"),
        ("https://h/v1?api_key=k&x=1", f"https://h/v1?api_key={MASK}&x=1"),
        ("sqlite:///runs.db", "sqlite:///runs.db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("host=h password='a b' user=u", f"host=h password={MASK} user=u"),
        ("max_tokens=5 eos_token=x", "max_tokens=5 eos_token=x"),
    ],
)
def test_mask_text(text, shown):
    assert mask_text(text) == shown


def test_mask_text_takes_time_linear_in_the_text():
    """A long word with no ``=`` or ``://`` after it costs one pass, not one per position (the
    check masks the values its messages quote, and a config's values are the user's)."""
    started = time.monotonic()
    for text in ("a" * 300_000 + "=", "ab" * 150_000 + "://", "password=x&" * 30_000):
        mask_text(text)
    assert time.monotonic() - started < 5


def test_mask_secrets_keeps_no_key_values_and_variable_names():
    record = {"api_key": "EMPTY", "token": "", "api_key_env": "MY_KEY", "max_tokens": 3, "password": "p"}
    assert mask_secrets(record) == {**record, "password": HIDDEN}


def test_the_written_record_is_yaml_the_run_can_read(tmp_path):
    """A job's config.yaml, masked, still loads (a URL stays a URL)."""
    overrides = [f"explorer.db_url={CLI_CREDENTIALS['explorer.db_url']}"]
    config = load_config(write(tmp_path), overrides)
    record = Path(tmp_path / "record.yaml")
    record.write_text(to_yaml(config))
    assert load_config(record).explorer.db_url.startswith(f"postgresql://trinity:{MASK}@")

"""``data_processor`` and ``service.data_juicer`` in the config: what the check derives and reports."""

from __future__ import annotations

import importlib.util

from config_helpers import issues_of, write

from trinity.config import load_config

PIPELINE = "data_processor.task_pipeline={inputs: [/data/raw.jsonl], operators: [{name: text_length_filter}]}"


def test_the_task_pipeline_writes_the_first_taskset_and_operators_get_the_service(tmp_path):
    extra = """
    service: {data_juicer: {auto_start: true, port: 5005}}
    data_processor:
      experience_pipeline:
        operators: [{name: data_juicer, args: {operators: [{text_length_filter: {min_len: 3}}]}}]
    """
    cfg = load_config(write(tmp_path, extra), [PIPELINE])
    assert cfg.data_processor.task_pipeline.output.path == "/data/tasks.jsonl"
    args = cfg.data_processor.experience_pipeline.operators[0].args
    server = {"allow_code_ops": False, "max_request_mb": 64, "max_rows": 100_000}
    assert args["service_config"] == {"server_url": None, "auto_start": True, "port": 5005, **server}
    assert args["np"] == 4


def test_a_task_pipeline_without_data_juicer_names_the_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "data_juicer" else real(name, *a))
    found = issues_of(write(tmp_path), [PIPELINE])
    assert found == {"data_processor.task_pipeline": 'needs Data-Juicer: pip install "trinity-core[data-juicer]"'}
    remote = "service.data_juicer={server_url: 'http://127.0.0.1:5005'}"
    assert load_config(write(tmp_path), [PIPELINE, remote]).data_processor.task_pipeline.output is not None

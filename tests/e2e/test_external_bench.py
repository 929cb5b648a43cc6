"""Bench mode on an API model (``model.external_model``): the eval tasksets run against an
OpenAI-compatible server given by URL; nothing is loaded into it."""

from __future__ import annotations

from e2e_helpers import trinity_run, write_experiment
from test_run import assert_ok, metrics

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.rollout.client import EngineClient
from trinity.rollout.transformers_rollout import TransformersRolloutEngine


def test_bench_evaluates_an_external_model(tmp_path, tiny_model_dir, arithmetic_data, monkeypatch):
    served = InferenceModelConfig(model_path=str(tiny_model_dir), engine_type="transformers", name="api-model")
    server = EngineClient(
        TransformersRolloutEngine(served, ModelConfig(model_path=str(tiny_model_dir), max_model_len=96))
    )
    server.serve_openai(served)
    monkeypatch.setenv("API_BASE_URL", server.api_url)
    eval_set = (
        f"[{{name: arith_eval, storage_type: file, path: {arithmetic_data / 'tasks.jsonl'},"
        " format: {prompt_key: question, response_key: answer}}]"
    )
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "mode=bench",
        "model.external_model={enable: true, base_url_env: API_BASE_URL, model_name: api-model}",
        f"buffer.explorer_input.eval_tasksets={eval_set}",
        "buffer.explorer_input.default_workflow_type=math_eval_workflow",
    )
    try:
        result = trinity_run(config)
    finally:
        server.close()
    assert_ok(result)
    (record,) = metrics(tmp_path, "explorer")
    assert "eval/arith_eval/accuracy/mean@1" in record, record
    assert "no checkpoint under" not in result.stderr  # nothing to load into a server's model

"""storage_type env_service (AgentEvolver's Environment Service, an HTTP server hosting AppWorld,
BFCL...; nothing here can serve it): a config naming it checks with a warning and does not run."""

from __future__ import annotations

import pytest

from trinity.config import ConfigError, load_config
from trinity.config.schema import StorageConfig
from trinity.plugins import Kind, resolve
from trinity_workflows.envs.env_service import REFUSAL

CONFIG = """
project: demo
name: run
checkpoint_root_dir: {root}
algorithm: {{algorithm_type: grpo, repeat_times: 4}}
model: {{model_path: /models/tiny, max_prompt_tokens: 64, max_response_tokens: 32}}
cluster: {{node_num: 1, gpu_per_node: 0}}
explorer: {{rollout_model: {{engine_type: transformers}}}}
trainer: {{trainer_type: torch}}
buffer:
  batch_size: 4
  explorer_input:
    taskset: {{name: appworld, storage_type: env_service, path: http://127.0.0.1:8080, default_workflow_type: math_workflow}}
    eval_tasksets: [{{name: dev, path: /data/dev.jsonl, default_workflow_type: math_workflow}}]
"""


def test_env_service_checks_with_a_warning_and_is_refused_at_run(tmp_path, caplog):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(root=tmp_path / "ckpt"))
    load_config(path)
    key = "buffer.explorer_input.tasksets[0].storage_type"
    assert f"{key}: {REFUSAL} (trinity run refuses it)" in caplog.text
    with pytest.raises(ConfigError) as err:
        load_config(path, run=True)
    assert {issue.path: issue.message for issue in err.value.issues} == {key: REFUSAL}
    assert "unknown" not in REFUSAL and "Environment Service" in REFUSAL


def test_opening_it_directly_says_the_same():
    storage = resolve(Kind.BUFFER_STORAGE, "env_service")
    with pytest.raises(RuntimeError, match="appworld: env_service names an Environment Service"):
        storage(StorageConfig(name="appworld", storage_type="env_service"))

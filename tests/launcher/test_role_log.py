"""A role's log file: its own lines, not one per HTTP request of the OpenAI clients (a judge or
an agent's run makes thousands)."""

from __future__ import annotations

import logging

from trinity.config import load_config
from trinity.runtime import actor_log_path, setup_role


def test_a_role_log_keeps_no_line_per_http_request(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        f"checkpoint_root_dir: {tmp_path}\nmode: train\nmonitor: {{monitor_type: console}}\n"
        "model: {model_path: /models/tiny, max_model_len: 64}\nbuffer: {train_batch_size: 8}\n"
    )
    config = load_config(path)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        setup_role(config, "explorer", None).close()
        for client in ("httpx", "httpx2"):  # openai < 3 sends through httpx, openai >= 3 through httpx2
            logging.getLogger(client).info('HTTP Request: POST http://127.0.0.1/v1/chat/completions "200 OK"')
        logging.getLogger("trinity.explorer").info("step 1")
    finally:
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    log = actor_log_path(config, "explorer").read_text()
    assert "step 1" in log
    assert "HTTP Request" not in log

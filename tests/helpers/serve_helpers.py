"""The serve-mode explorer the in-process serve tests share (tests/explorer, tests/security)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from trinity.config import load_config
from trinity.explorer.explorer import Explorer


def serve_explorer(root: Path, tiny_model_dir: Path, key: str, *overrides: str) -> Explorer:
    """A serve-mode explorer on the tiny model whose endpoints require ``key`` (16 prompt and 2
    response tokens keep each completion quick); ``overrides``: dotlist settings
    (``buffer.trainer_input.experience_buffer.path=...``)."""
    path = root / "serve.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            mode: serve
            checkpoint_root_dir: {root / "ckpt"}
            model: {{model_path: {tiny_model_dir}, max_prompt_tokens: 16, max_response_tokens: 2}}
            cluster: {{node_num: 1, gpu_per_node: 0}}
            explorer: {{rollout_model: {{engine_type: transformers, api_key: {key}}}}}
            trainer: {{trainer_type: torch}}
            synchronizer: {{sync_method: checkpoint}}
            buffer: {{train_batch_size: 2}}
            """
        )
    )
    return Explorer(load_config(path, list(overrides)))

"""Small file helpers for metadata that another process may read at any moment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: str | Path, data: Any) -> None:
    """Write atomically (temp file + rename): a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def read_json(path: str | Path) -> Any | None:
    """The file's JSON, or None when it does not exist."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


DATA_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
"""The data files a taskset or dataset may be, by suffix, and the ``datasets`` builder of each."""

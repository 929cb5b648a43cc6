"""Small file helpers for metadata that another process may read at any moment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: str | Path, data: Any, sync: bool = False) -> None:
    """Write atomically (temp file + rename): a reader never sees half a file. ``sync``: the
    file and the rename are on disk when this returns (fsync of the file, then its folder),
    so a power loss cannot roll it back (``buffer.durability: safe``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, indent=1))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    tmp.replace(path)
    if sync:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def read_json(path: str | Path) -> Any | None:
    """The file's JSON, or None when it does not exist."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


DATA_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
"""The data files a taskset or dataset may be, by suffix, and the ``datasets`` builder of each."""

"""Writer and reader processes for the multi-process buffer tests (run as scripts).

    python buffer_procs.py write DB NAME WRITER START COUNT BATCH
    python buffer_procs.py read DB NAME OUT BATCH PAUSE AUTO_COMMIT

The reader keeps what it got and its position in OUT (replaced atomically, then committed:
the trainer's checkpoint pattern) and resumes from OUT when restarted.
"""

from __future__ import annotations

import json
import os
import sys
import time

from buffer_helpers import make_experience

from trinity.buffer import EndOfBuffer, open_experience_reader, open_experience_writer
from trinity.config.schema import ExperienceBufferConfig


def storage(db: str, name: str) -> ExperienceBufferConfig:
    return ExperienceBufferConfig(name=name, storage_type="queue", path=db, capacity=1_000_000, max_read_timeout=60)


def write(db: str, name: str, writer_name: str, start: int, count: int, batch: int) -> None:
    writer = open_experience_writer(storage(db, name), writer_name)
    for first in range(start, start + count, batch):
        writer.write([make_experience(i) for i in range(first, min(first + batch, start + count))])
    writer.finish()


def read(db: str, name: str, out: str, batch: int, pause: float, auto_commit: bool) -> None:
    reader = open_experience_reader(storage(db, name), auto_commit=auto_commit)
    got: list[int] = []
    if os.path.exists(out):
        with open(out) as f:
            saved = json.load(f)
        got = saved["got"]
        reader.load_state_dict(saved["state"])
    while True:
        try:
            got += [int(e.reward) for e in reader.read(batch)]
        except EndOfBuffer:
            break
        with open(out + ".tmp", "w") as f:
            json.dump({"got": got, "state": reader.state_dict()}, f)
        os.replace(out + ".tmp", out)
        reader.commit()
        time.sleep(pause)
    with open(out + ".tmp", "w") as f:
        json.dump({"got": got, "state": reader.state_dict(), "done": True}, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "write":
        write(args[0], args[1], args[2], *map(int, args[3:6]))
    else:
        read(args[0], args[1], args[2], int(args[3]), float(args[4]), args[5] == "1")

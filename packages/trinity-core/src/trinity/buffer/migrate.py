"""``trinity buffer migrate``: rewrite a database's pickled experience rows without pickle.

A trinity before 2026-11-27 pickled an experience's header when its ``info`` held a value JSON
could not (a numpy number, a set, an object). This trinity refuses such rows (reading one runs
whatever code its writer put there) unless the buffer's ``trust_pickled_rows`` is set. The
migration reads them once, trusting the database as its owner says, and writes them back in
today's form: numpy values, sets, tuples and paths become plain values; a row holding another
object stays as it was and is named, so that nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

from trinity.buffer.serialization import deserialize_experience, is_pickled, serialize_experience
from trinity.buffer.storage.sql import database_url, shared_engine

CHUNK = 500
"""Rows read per query: a large buffer is scanned without holding it in memory."""


@dataclass
class Migration:
    """What a scan found, per table, and (when rewriting) what it rewrote and could not."""

    pickled: dict[str, int] = field(default_factory=dict)
    rewritten: int = 0
    failed: list[str] = field(default_factory=list)  # "table row id: reason"


def _experience_tables(engine: sa.Engine) -> list[sa.Table]:
    """Tables of serialised experiences: an integer ``id`` and a binary ``data`` column."""
    meta = sa.MetaData()
    meta.reflect(engine)
    return [
        t for t in meta.sorted_tables if {"id", "data"} <= set(t.c.keys()) and isinstance(t.c.data.type, sa.LargeBinary)
    ]


def migrate(path: str, rewrite: bool, progress: Callable[[str], None] = lambda _: None) -> Migration:
    """Scan the database at ``path`` (a sqlite file or a URL) for pickled rows; with ``rewrite``,
    write each again without pickle, one transaction per chunk."""
    engine = shared_engine(database_url(path))
    result = Migration()
    for table in _experience_tables(engine):
        after, found = 0, 0
        while True:
            with engine.begin() as conn:
                query = sa.select(table.c.id, table.c.data).where(table.c.id > after).order_by(table.c.id)
                rows = conn.execute(query.limit(CHUNK)).all()
                if not rows:
                    break
                after = rows[-1][0]
                pickled = [(row_id, data) for row_id, data in rows if is_pickled(data)]
                found += len(pickled)
                for row_id, data in pickled if rewrite else ():
                    try:
                        plain = serialize_experience(deserialize_experience(data, trust_pickle=True))
                    except Exception as exc:  # noqa: BLE001 - an object JSON cannot hold, a class that is gone
                        result.failed.append(f"{table.name} row {row_id}: {type(exc).__name__}: {exc}")
                        continue
                    conn.execute(table.update().where(table.c.id == row_id).values(data=plain))
                    result.rewritten += 1
            progress(f"{table.name}: {after} rows scanned, {found} pickled")
        if found:
            result.pickled[table.name] = found
    return result

"""Priority replay on a durable queue (``replay_buffer.enable`` with a ``path``): the state in SQL.

Writers append to the queue's log as always; readers take experiences out of a replay table
beside it, ``<name>_replay`` (priority, use count, when it may be read again), one write
transaction per ``take``. So priorities, use counts and cooldowns survive a restart, and readers
in several processes share one replay buffer. A jsonl queue keeps the table in
``<path>.replay.db`` (sqlite). See ``docs/buffer.md``.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from trinity.buffer.priority import PriorityFn
from trinity.buffer.serialization import deserialize_experience, serialize_experience
from trinity.buffer.storage.base import _POLL_MAX, _POLL_MIN, ExperienceReader, Log
from trinity.buffer.storage.sql import (
    Reconnect,
    create_tables,
    lock_table_sql,
    shared_engine,
    store_uncompressed,
    table_prefix,
    write_transaction,
)
from trinity.common.experience import Experience

_FEED_CHUNK = 1024


class ReplayTable:
    """The replay state of one buffer: ``<name>_replay`` (the experiences) and ``<name>_replay_feed``
    (how far into the log they were taken over; a string, as jsonl positions exceed 64 bits)."""

    def __init__(
        self, url: str, log: Log, score: PriorityFn, capacity: int, cooldown: float | None, reconnect: Reconnect
    ):
        self.log, self.score, self.capacity, self.cooldown = log, score, capacity, cooldown
        self.engine = shared_engine(url, reconnect=reconnect)
        prefix = table_prefix(log.name)
        meta = sa.MetaData()
        self.items = sa.Table(
            f"{prefix}_replay",
            meta,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("priority", sa.Float, nullable=False),
            sa.Column("ready_at", sa.Float, nullable=False),
            sa.Column("model_version", sa.Integer, nullable=False),
            sa.Column("use_count", sa.Integer, nullable=False),
            sa.Column("data", sa.LargeBinary, nullable=False),
            sa.Index(f"{prefix}_replay_order", "priority", "ready_at"),
        )
        self.feed = sa.Table(
            f"{prefix}_replay_feed",
            meta,
            sa.Column("log", sa.String(255), primary_key=True),
            sa.Column("position", sa.String(40), nullable=False),
        )
        store_uncompressed(self.items)
        create_tables(self.engine, meta, f"{prefix}_replay")
        self._lock_sql = lock_table_sql(self.engine, self.items)

    def take(self, n: int) -> tuple[list[Experience], bool]:
        """Up to ``n`` experiences by priority, and whether the buffer has ended (every writer
        finished, all of the log taken over, nothing left to replay)."""
        writers_done = self.log.writers_done()  # before the last look at the log
        now = time.time()
        with write_transaction(self.engine) as conn:
            if self._lock_sql:  # readers take turns, as on sqlite's write lock
                conn.exec_driver_sql(self._lock_sql)
            self._feed(conn, now)
            items = self.items.c
            order = (items.priority.desc(), items.ready_at, items.id)
            rows = conn.execute(
                sa.select(items.id, items.model_version, items.use_count, items.data)
                .where(items.ready_at <= now)
                .order_by(*order)
                .limit(n)
            ).all()
            for row in rows:
                self._reuse_or_drop(conn, row, now)
            left = conn.execute(sa.select(sa.func.count()).select_from(self.items)).scalar()
        return [deserialize_experience(row.data) for row in rows], writers_done and not left and not rows

    def _feed(self, conn: sa.Connection, now: float) -> None:
        """Take the log's new experiences over, scored; drop the lowest priorities beyond capacity."""
        key = self.log.name
        found = conn.execute(sa.select(self.feed.c.position).where(self.feed.c.log == key)).scalar()
        position = start = int(found or 0)
        while True:
            experiences, position = self.log.fetch(position, _FEED_CHUNK)
            rows = [
                {"priority": priority, "ready_at": now, "model_version": exp.model_version, "use_count": 0}
                | {"data": serialize_experience(exp)}
                for exp in experiences
                if (priority := self.score(exp.model_version, 0)) is not None
            ]
            if rows:
                conn.execute(self.items.insert(), rows)
            if len(experiences) < _FEED_CHUNK:
                break
        if position == start:
            return
        if found is None:
            conn.execute(self.feed.insert().values(log=key, position=str(position)))
        else:
            conn.execute(self.feed.update().where(self.feed.c.log == key).values(position=str(position)))
        excess = conn.execute(sa.select(sa.func.count()).select_from(self.items)).scalar() - self.capacity
        if excess > 0:  # the lowest priorities, the latest in first
            items = self.items.c
            lowest = sa.select(items.id).order_by(items.priority, items.ready_at.desc(), items.id.desc()).limit(excess)
            conn.execute(self.items.delete().where(items.id.in_(lowest.scalar_subquery())))

    def _reuse_or_drop(self, conn: sa.Connection, row: Any, now: float) -> None:
        where = self.items.c.id == row.id
        use_count = row.use_count + 1
        priority = None if self.cooldown is None else self.score(row.model_version, use_count)
        if priority is None:
            conn.execute(self.items.delete().where(where))
        else:
            ready_at = now + self.cooldown
            conn.execute(
                self.items.update().where(where).values(priority=priority, use_count=use_count, ready_at=ready_at)
            )


class ReplayReader(ExperienceReader):
    """Reads a ``ReplayTable`` by polling (2 ms doubling to 50 ms while idle); a read consumes."""

    def __init__(self, table: ReplayTable, default_timeout: float):
        super().__init__(table.log.name, default_timeout)
        self.table = table

    def _take(self, n: int, deadline: float) -> tuple[list[Experience], bool]:
        got: list[Experience] = []
        pause = _POLL_MIN
        while True:
            more, ended = self.table.take(n - len(got))
            got += more
            if len(got) >= n or ended:
                return got, ended
            now = time.monotonic()
            if now >= deadline:
                return got, False
            if more:
                pause = _POLL_MIN
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, _POLL_MAX)

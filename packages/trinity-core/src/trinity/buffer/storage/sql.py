"""Experiences in a SQL database through SQLAlchemy Core: sqlite by default, any URL works.

Three tables per buffer: ``<name>_exp`` (id, model_version, serialised experience),
``<name>_writers`` and ``<name>_cursors``. sqlite runs in WAL mode with ``BEGIN
IMMEDIATE`` write transactions, so several processes can write and read the same file: each
``append`` is one transaction (executemany), each ``claim`` reads and moves a cursor
under the write lock. On PostgreSQL (``postgresql://`` URLs, driven by psycopg 3: the
``trinity-core[postgres]`` extra), ``append`` locks the experience table so ids follow
commit order (readers then never skip a row that commits late), a claim locks its cursor
row, and processes creating the tables together take turns on an advisory lock.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from trinity.buffer.serialization import deserialize_experience, serialize_experience
from trinity.buffer.storage.base import Log, LogStorage
from trinity.common.experience import Experience
from trinity.config.schema import StorageConfig

_ENGINES: dict[str, sa.Engine] = {}
_SQLITE_PAGE_SIZE = 32768
"""Large pages keep a ~7 KB experience off overflow chains: twice the write rate of 4 KB pages."""


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def database_url(path: str) -> str:
    """A SQLAlchemy URL for ``path``: a file path becomes ``sqlite:///<abs>``; a PostgreSQL URL
    without a driver (Trinity-RFT's ``postgresql://...``) uses psycopg 3; other URLs pass through."""
    if path.startswith(_POSTGRES_SCHEMES):
        return "postgresql+psycopg://" + path.split("://", 1)[1]
    if "://" in path:
        return path
    return f"sqlite:///{os.path.abspath(path)}"


def shared_engine(url: str) -> sa.Engine:
    """One engine per URL and process (engines pool connections; never share across fork)."""
    key = f"{os.getpid()}:{url}"
    if key not in _ENGINES:
        if url.startswith("sqlite"):
            database = sa.engine.make_url(url).database
            if database and database != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
            engine = sa.create_engine(url, connect_args={"timeout": 120, "check_same_thread": False})

            @sa.event.listens_for(engine, "connect")
            def _connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" event issues BEGIN
                dbapi_conn.execute(f"PRAGMA page_size={_SQLITE_PAGE_SIZE}")  # new files only
                dbapi_conn.execute("PRAGMA journal_mode=WAL")
                dbapi_conn.execute("PRAGMA synchronous=NORMAL")

            @sa.event.listens_for(engine, "begin")
            def _begin(conn: sa.Connection) -> None:  # writes take the lock up front: no upgrade deadlocks
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")
        else:
            try:
                engine = sa.create_engine(url, pool_pre_ping=True)
            except ModuleNotFoundError as exc:
                raise ModuleNotFoundError(
                    f"no database driver for {sa.engine.make_url(url).drivername}: {exc.msg}"
                    " (PostgreSQL: pip install 'trinity-core[postgres]')"
                ) from exc
        _ENGINES[key] = engine
    return _ENGINES[key]


@contextmanager
def write_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction (on sqlite ``BEGIN IMMEDIATE``; reads stay concurrent)."""
    with engine.connect() as conn:
        conn.execution_options(write=True)
        with conn.begin():
            yield conn


def table_prefix(buffer: str) -> str:
    """The start of the table names of ``buffer`` (``<prefix>_exp``...)."""
    return re.sub(r"\W", "_", buffer) or "experience_buffer"


def lock_table_sql(engine: sa.Engine, table: sa.Table) -> str | None:
    """On PostgreSQL, the statement that makes ``table``'s writers take turns (sqlite: the write lock does)."""
    if engine.dialect.name != "postgresql":
        return None
    return f"LOCK TABLE {engine.dialect.identifier_preparer.format_table(table)} IN EXCLUSIVE MODE"


def store_uncompressed(table: sa.Table, column: str = "data") -> None:
    """On PostgreSQL, keep ``column`` out of line uncompressed (``STORAGE EXTERNAL``), set when the
    table is created: compressing a 7 KB serialised experience costs the server more than the bytes
    save (bench_buffer: 1.5x the write rate)."""
    ddl = f"ALTER TABLE %(table)s ALTER COLUMN {column} SET STORAGE EXTERNAL"
    sa.event.listen(table, "after_create", sa.DDL(ddl).execute_if(dialect="postgresql"))


def create_tables(engine: sa.Engine, meta: sa.MetaData, name: str) -> None:
    """Create the missing tables of ``meta``; processes starting together take turns (sqlite: the
    write lock; PostgreSQL, where no table exists yet to lock: an advisory lock on ``name``)."""
    with write_transaction(engine) as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": name})
        meta.create_all(conn)


class SqlLog(Log):
    """A ``Log`` in the tables ``<name>_exp``, ``<name>_writers``, ``<name>_cursors``."""

    def __init__(self, url: str, name: str):
        self.name = name
        self.engine = shared_engine(url)
        prefix = table_prefix(name)
        meta = sa.MetaData()

        def table(suffix: str, key: sa.Column, **columns: Any) -> sa.Table:
            not_null = (sa.Column(name, kind, nullable=False) for name, kind in columns.items())
            return sa.Table(f"{prefix}_{suffix}", meta, key, *not_null)

        serial = sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)
        self.exp = table("exp", serial, model_version=sa.Integer, data=sa.LargeBinary)
        name_key = sa.Column("name", sa.String(255), primary_key=True)
        self.writers = table("writers", name_key, finished=sa.Boolean, updated=sa.Float)
        reader_key = sa.Column("reader", sa.String(255), primary_key=True)
        self.cursors = table("cursors", reader_key, position=sa.Integer, progress=sa.Integer)
        self.postgres = self.engine.dialect.name == "postgresql"
        store_uncompressed(self.exp)
        create_tables(self.engine, meta, prefix)
        self._lock_sql = lock_table_sql(self.engine, self.exp)

    def _write(self) -> AbstractContextManager[sa.Connection]:
        return write_transaction(self.engine)

    def _upsert(
        self, conn: sa.Connection, table: sa.Table, key: dict[str, Any], values: dict[str, Any], **defaults: Any
    ) -> None:
        """Update the row of ``key`` with ``values``, or insert it (with ``defaults`` for other columns)."""
        (column, value) = next(iter(key.items()))
        if conn.execute(table.update().where(table.c[column] == value).values(**values)).rowcount == 0:
            conn.execute(table.insert().values(**key, **defaults, **values))

    def open_writer(self, writer: str) -> None:
        with self._write() as conn:
            self._upsert(conn, self.writers, {"name": writer}, {"finished": False, "updated": time.time()})

    def finish_writer(self, writer: str) -> None:
        with self._write() as conn:
            self._upsert(conn, self.writers, {"name": writer}, {"finished": True, "updated": time.time()})

    def writers_done(self) -> bool:
        with self.engine.connect() as conn:
            total, finished = conn.execute(
                sa.select(sa.func.count(), sa.func.sum(sa.cast(self.writers.c.finished, sa.Integer)))
            ).one()
        return total > 0 and finished == total

    def append(self, experiences: list[Experience]) -> None:
        rows = [{"model_version": e.model_version, "data": serialize_experience(e)} for e in experiences]
        with self._write() as conn:
            if self._lock_sql:
                conn.exec_driver_sql(self._lock_sql)
            conn.execute(self.exp.insert(), rows)

    def _fetch(self, conn: sa.Connection, after: int, n: int) -> tuple[list[Experience], int]:
        query = sa.select(self.exp.c.id, self.exp.c.data).where(self.exp.c.id > after).order_by(self.exp.c.id)
        rows = conn.execute(query.limit(n)).all()
        if not rows:
            return [], after
        return [deserialize_experience(data) for _, data in rows], rows[-1][0]

    def fetch(self, after: int, n: int) -> tuple[list[Experience], int]:
        with self.engine.connect() as conn:
            return self._fetch(conn, after, n)

    def _cursor(self, conn: sa.Connection, reader: str, lock: bool = False) -> int:
        if lock and self.postgres:  # a row to lock, so that readers sharing the name take turns
            new = {"reader": reader, "position": 0, "progress": 0}
            conn.execute(postgresql.insert(self.cursors).values(**new).on_conflict_do_nothing())
        query = sa.select(self.cursors.c.position).where(self.cursors.c.reader == reader)
        found = conn.execute(query.with_for_update() if lock else query).scalar()
        return int(found or 0)

    def claim(self, reader: str, n: int) -> tuple[list[Experience], int]:
        with self._write() as conn:
            after = self._cursor(conn, reader, lock=True)
            experiences, position = self._fetch(conn, after, n)
            if experiences:
                self._upsert(conn, self.cursors, {"reader": reader}, {"position": position, "progress": position})
        return experiences, position

    def cursor(self, reader: str) -> int:
        with self.engine.connect() as conn:
            return self._cursor(conn, reader)

    def set_cursor(self, reader: str, position: int) -> None:
        with self._write() as conn:
            self._upsert(conn, self.cursors, {"reader": reader}, {"position": position, "progress": position})

    def set_progress(self, reader: str, position: int) -> None:
        with self._write() as conn:
            self._upsert(conn, self.cursors, {"reader": reader}, {"progress": position}, position=0)

    def unread(self) -> int:
        last = sa.select(sa.func.max(self.exp.c.id)).scalar_subquery()
        slowest = sa.select(sa.func.min(self.cursors.c.progress)).scalar_subquery()
        with self.engine.connect() as conn:  # one statement: one round trip to a server
            last, slowest = conn.execute(sa.select(last, slowest)).one()
        return (last or 0) - (slowest or 0)


class SQLStorage(LogStorage):
    """``storage_type: sql``: tables in a database (``path``: a file path or a SQLAlchemy URL)."""

    def __init__(self, storage: StorageConfig, namespace: str | None = None):
        super().__init__(storage)
        if not storage.path:
            raise ValueError(
                f"buffer {storage.name!r}: storage_type sql needs a path (a sqlite file or a database URL)"
            )
        self.url = database_url(storage.path)

    def open_log(self) -> SqlLog:
        return SqlLog(self.url, self.storage.name)

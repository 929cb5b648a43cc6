"""Experiences in a SQL database through SQLAlchemy Core: sqlite by default, any URL works.

Three tables per buffer: ``<name>_exp`` (the serialised experiences), ``<name>_writers``
(generation, heartbeat, state, wait) and ``<name>_cursors`` (position, progress, generation).
Several processes write and read one database: sqlite in WAL mode with ``BEGIN IMMEDIATE``
writes, PostgreSQL (``trinity-core[postgres]``) with table and row locks. Durability, how a
server out of reach is tried again and how a lost append is stored once: ``docs/buffer.md``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from trinity.buffer.errors import BufferUnavailable, Fenced
from trinity.buffer.serialization import deserialize_experience, serialize_experience
from trinity.buffer.storage.base import Lease, Log, LogStorage, WriterStatus
from trinity.common.errors import first_line
from trinity.common.experience import Experience
from trinity.config.schema import StorageConfig

logger = logging.getLogger(__name__)

_ENGINES: dict[str, sa.Engine] = {}
_SQLITE_PAGE_SIZE = 32768
"""Large pages keep a ~7 KB experience off overflow chains: twice the write rate of 4 KB pages."""
_LOCK_WAIT = 120.0
"""Seconds a sqlite connection waits on another process's lock before it fails."""
_SYNCHRONOUS = {"fast": "NORMAL", "safe": "FULL"}
_T = TypeVar("_T")


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def database_url(path: str) -> str:
    """A SQLAlchemy URL for ``path``: a file path becomes ``sqlite:///<abs>``; a PostgreSQL URL
    without a driver (Trinity-RFT's ``postgresql://...``) uses psycopg 3; other URLs pass through."""
    if path.startswith(_POSTGRES_SCHEMES):
        return "postgresql+psycopg://" + path.split("://", 1)[1]
    if "://" in path:
        return path
    return f"sqlite:///{os.path.abspath(path)}"


@dataclass(frozen=True)
class Reconnect:
    """How often a connection to a database server is attempted before an operation fails
    (a storage's ``max_retry_times``, at least one attempt, ``max_retry_interval`` s apart)."""

    attempts: int = 1
    interval: float = 1.0

    @classmethod
    def of(cls, storage: StorageConfig) -> Reconnect:
        return cls(max(1, storage.max_retry_times), storage.max_retry_interval)


def shared_engine(url: str, durability: str = "fast", reconnect: Reconnect = Reconnect()) -> sa.Engine:
    """One engine per URL, durability, reconnect policy and process (engines pool connections;
    never share across fork)."""
    key = f"{os.getpid()}:{durability}:{reconnect}:{url}"
    if key not in _ENGINES:
        if url.startswith("sqlite"):
            database = sa.engine.make_url(url).database
            if database and database != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
            engine = sa.create_engine(url, connect_args={"timeout": _LOCK_WAIT, "check_same_thread": False})

            @sa.event.listens_for(engine, "connect")
            def _connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" event issues BEGIN
                dbapi_conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[durability]}")

            @sa.event.listens_for(engine, "begin")
            def _begin(conn: sa.Connection) -> None:  # writes take the lock up front: no upgrade deadlocks
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

            _retry_busy(lambda: _use_wal(engine))
        else:
            try:
                engine = sa.create_engine(url, pool_pre_ping=True)
            except ModuleNotFoundError as exc:
                raise ModuleNotFoundError(
                    f"no database driver for {sa.engine.make_url(url).drivername}: {exc.msg}"
                    " (PostgreSQL: pip install 'trinity-core[postgres]')"
                ) from exc
            _attempt_connections(engine, reconnect)
        _ENGINES[key] = engine
    return _ENGINES[key]


def _attempt_connections(engine: sa.Engine, reconnect: Reconnect) -> None:
    """Each new connection of ``engine`` (a server's) is attempted ``reconnect.attempts`` times:
    nothing was sent yet, so trying again cannot repeat a write."""
    if reconnect.attempts == 1:
        return
    where = engine.url.render_as_string(hide_password=True)

    @sa.event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _record: Any, cargs: tuple, cparams: dict) -> Any:
        for attempt in range(1, reconnect.attempts + 1):
            try:
                return dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.OperationalError as exc:
                if attempt == reconnect.attempts:
                    raise
                logger.warning(
                    "database %s out of reach (%s); attempt %d of %d in %g s (max_retry_times, max_retry_interval)",
                    where,
                    first_line(exc),
                    attempt + 1,
                    reconnect.attempts,
                    reconnect.interval,
                )
                time.sleep(reconnect.interval)


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
    """Create the missing tables of ``meta`` and the missing columns of existing ones (a buffer an
    older trinity wrote); processes starting together take turns (sqlite: the write lock;
    PostgreSQL, where no table exists yet to lock: an advisory lock on ``name``)."""

    def create() -> None:
        with write_transaction(engine) as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": name})
            meta.create_all(conn)
            _add_missing_columns(conn, meta)

    _retry_busy(create)


_NEUTRAL_DEFAULTS = {sa.Integer: "0", sa.Float: "0", sa.Boolean: "false"}
"""What a column added to an older buffer's rows holds: generation 0 (the next open takes 1),
no appends counted, no heartbeat yet, not finished. Other columns are added nullable (a
writer's ``state``)."""


def _add_missing_columns(conn: sa.Connection, meta: sa.MetaData) -> None:
    """Columns of ``meta`` that the database's tables lack (fencing generations, writer states,
    added since the buffer was written), added with a neutral value, so its rows stay readable."""
    inspector = sa.inspect(conn)
    preparer = conn.dialect.identifier_preparer
    for table in meta.sorted_tables:
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            default = next((v for kind, v in _NEUTRAL_DEFAULTS.items() if isinstance(column.type, kind)), None)
            ddl = f"ALTER TABLE {preparer.format_table(table)} ADD COLUMN {preparer.format_column(column)} "
            ddl += column.type.compile(dialect=conn.dialect)
            ddl += f" NOT NULL DEFAULT {default}" if default is not None and not column.nullable else ""
            conn.execute(sa.text(ddl))
            logger.warning("buffer table %s: added column %s (written by an older trinity)", table.name, column.name)


def _use_wal(engine: sa.Engine) -> None:
    """Switch a sqlite file to WAL (persistent: once per file; large pages first, on a new file)."""
    conn = engine.raw_connection()  # outside any transaction: sqlite switches modes only there
    try:
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute(f"PRAGMA page_size={_SQLITE_PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def _retry_busy(action: Callable[[], _T]) -> _T:
    """``action()``, again while sqlite reports a lock (up to ``_LOCK_WAIT`` s): switching the
    journal mode, or the first transaction on a file another process is setting up, can fail
    at once with "database is locked" instead of waiting on the busy timeout."""
    deadline, pause = time.monotonic() + _LOCK_WAIT, 0.005
    while True:
        try:
            return action()
        except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:  # the latter: raw connections
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


class Connections:
    """A buffer's connections to its database. On a server, one still out of reach after its
    ``Reconnect`` attempts is ``BufferUnavailable``, naming the buffer."""

    def __init__(self, engine: sa.Engine, buffer: str, reconnect: Reconnect):
        self.engine, self.buffer, self.reconnect = engine, buffer, reconnect
        self.server = engine.dialect.name != "sqlite"

    def unavailable(self, exc: BaseException, lost: bool = False) -> BufferUnavailable:
        where = self.engine.url.render_as_string(hide_password=True)
        attempts, interval = self.reconnect.attempts, self.reconnect.interval
        return BufferUnavailable(self.buffer, where, first_line(exc), attempts, interval, lost)

    def connect(self) -> sa.Connection:
        try:
            return self.engine.connect()
        except sa.exc.OperationalError as exc:
            if not self.server:
                raise
            raise self.unavailable(exc) from exc

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """A write transaction (on sqlite ``BEGIN IMMEDIATE``; reads stay concurrent). On a
        server, a connection lost on the way is ``BufferUnavailable`` with ``lost`` (the commit
        may have landed)."""
        try:
            with self.connect() as conn:
                conn.execution_options(write=True)
                with conn.begin():
                    yield conn
        except sa.exc.DBAPIError as exc:
            if not (self.server and exc.connection_invalidated):
                raise
            raise self.unavailable(exc, lost=True) from exc


class SqlLog(Log):
    """A ``Log`` in the tables ``<name>_exp``, ``<name>_writers``, ``<name>_cursors``."""

    def __init__(
        self,
        url: str,
        name: str,
        durability: str = "fast",
        reconnect: Reconnect = Reconnect(),
        trust_pickled_rows: bool = False,
    ):
        self.name = name
        self.trust_pickled_rows = trust_pickled_rows
        self.reconnect = reconnect
        self.engine = shared_engine(url, durability, reconnect)
        self.db = Connections(self.engine, name, reconnect)
        prefix = table_prefix(name)
        meta = sa.MetaData()

        def table(suffix: str, key: sa.Column, **columns: Any) -> sa.Table:
            not_null = (sa.Column(name, kind, nullable=False) for name, kind in columns.items())
            return sa.Table(f"{prefix}_{suffix}", meta, key, *not_null)

        serial = sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)
        self.exp = table("exp", serial, model_version=sa.Integer, data=sa.LargeBinary)
        name_key = sa.Column("name", sa.String(255), primary_key=True)
        self.writers = table("writers", name_key, finished=sa.Boolean, updated=sa.Float, generation=sa.Integer)
        self.writers.append_column(sa.Column("state", sa.Text, nullable=True))
        # how many appends the name committed: tells whether one whose connection dropped landed
        self.writers.append_column(sa.Column("appends", sa.Integer, nullable=False, default=0))
        reader_key = sa.Column("reader", sa.String(255), primary_key=True)
        self.cursors = table("cursors", reader_key, position=sa.Integer, progress=sa.Integer, generation=sa.Integer)
        self._leased = {"writer": (self.writers, self.writers.c.name), "reader": (self.cursors, self.cursors.c.reader)}
        self.postgres = self.engine.dialect.name == "postgresql"
        store_uncompressed(self.exp)
        create_tables(self.engine, meta, prefix)
        self._lock_sql = lock_table_sql(self.engine, self.exp)

    def _upsert(
        self, conn: sa.Connection, table: sa.Table, key: dict[str, Any], values: dict[str, Any], **defaults: Any
    ) -> None:
        """Update the row of ``key`` with ``values``, or insert it (with ``defaults`` for other columns)."""
        (column, value) = next(iter(key.items()))
        if conn.execute(table.update().where(table.c[column] == value).values(**values)).rowcount == 0:
            conn.execute(table.insert().values(**key, **defaults, **values))

    def _generation(self, conn: sa.Connection, kind: str, name: str) -> int:
        table, key = self._leased[kind]
        found = conn.execute(sa.select(table.c.generation).where(key == name).with_for_update()).scalar()
        return int(found or 0)

    def _check(self, conn: sa.Connection, lease: Lease, *also: sa.Column) -> tuple[Any, ...]:
        """Raise ``Fenced`` unless ``lease`` is its name's current generation (inside a write,
        locking the name's row); the row's columns ``also``."""
        table, key = self._leased[lease.kind]
        found = conn.execute(sa.select(table.c.generation, *also).where(key == lease.name).with_for_update()).first()
        current = int(found[0]) if found else 0
        if current != lease.generation:
            raise Fenced(self.name, lease.kind, lease.name, lease.generation, current)
        return tuple(found[1:])

    def _bump(self, kind: str, name: str, values: dict[str, Any], **defaults: Any) -> Lease:
        """A new generation for ``name``; retried on busy like the open itself (the first write
        to a file other processes are still setting up can fail at once)."""
        table, key = self._leased[kind]

        def bump() -> Lease:
            with self.db.write() as conn:
                lease = Lease(kind, name, self._generation(conn, kind, name) + 1)
                self._upsert(conn, table, {key.name: name}, {**values, "generation": lease.generation}, **defaults)
            return lease

        return _retry_busy(bump)

    @contextmanager
    def fence(self, lease: Lease) -> Iterator[None]:
        with self.db.write() as conn:
            self._check(conn, lease)
            yield

    def open_writer(self, writer: str) -> Lease:
        return self._bump("writer", writer, {"finished": False, "updated": time.time()})

    def open_reader(self, reader: str) -> Lease:
        return self._bump("reader", reader, {}, position=0, progress=0)

    def _mark_writer(self, lease: Lease, **values: Any) -> None:
        with self.db.write() as conn:
            self._check(conn, lease)
            conn.execute(self.writers.update().where(self.writers.c.name == lease.name).values(**values))

    def heartbeat(self, lease: Lease) -> None:
        self._mark_writer(lease, updated=time.time())

    def finish_writer(self, lease: Lease) -> None:
        self._mark_writer(lease, finished=True, updated=time.time())

    def writer_statuses(self) -> list[WriterStatus]:
        columns = self.writers.c
        with self.db.connect() as conn:
            rows = conn.execute(sa.select(columns.name, columns.finished, columns.updated)).all()
        return [WriterStatus(name, bool(finished), updated) for name, finished, updated in rows]

    def writer_state(self, writer: str) -> dict[str, Any] | None:
        with self.db.connect() as conn:
            found = conn.execute(sa.select(self.writers.c.state).where(self.writers.c.name == writer)).scalar()
        return json.loads(found) if found else None

    def append(self, experiences: list[Experience], lease: Lease, state: dict[str, Any] | None) -> None:
        """One transaction: the rows, the writer's ``state`` and its append count. On a server,
        a connection lost on the way (at the COMMIT, the client cannot know whether it landed)
        is followed by another attempt once connected, ``max_retry_times`` in all: when the
        count already holds the lost append, it landed and nothing is written again."""
        rows = [{"model_version": e.model_version, "data": serialize_experience(e)} for e in experiences]
        values: dict[str, Any] = {} if state is None else {"state": json.dumps(state)}
        number: int | None = None  # this append's count, once read: the lost attempt's
        lost: BufferUnavailable | None = None
        attempts = self.reconnect.attempts
        for attempt in range(1, attempts + 1):
            try:
                with self.db.write() as conn:
                    if self._lock_sql:
                        conn.exec_driver_sql(self._lock_sql)
                    (appends,) = self._check(conn, lease, self.writers.c.appends)
                    if number is not None and appends >= number:
                        self._tell_lost(lease, lost, "it had landed: not written again")
                        return
                    if lost is not None:
                        self._tell_lost(
                            lease, lost, f"it had not landed: written again (attempt {attempt} of {attempts})"
                        )
                    number = appends + 1
                    if rows:
                        conn.execute(self.exp.insert(), rows)
                    update = self.writers.update().where(self.writers.c.name == lease.name)
                    conn.execute(update.values(appends=number, updated=time.time(), **values))
                return
            except BufferUnavailable as exc:
                if lost is not None and not exc.lost:  # no connection came back to find out
                    raise self.db.unavailable(exc.__cause__ or exc, lost=True) from exc
                if not exc.lost or attempt == attempts:
                    raise
                lost = exc

    def _tell_lost(self, lease: Lease, lost: BufferUnavailable | None, outcome: str) -> None:
        cause = lost.__cause__ if lost is not None and lost.__cause__ is not None else lost
        logger.warning(
            "buffer %r: writer %r lost its connection during an append (%s); %s",
            self.name,
            lease.name,
            first_line(cause) if cause is not None else "",
            outcome,
        )

    def _fetch(self, conn: sa.Connection, after: int, n: int) -> tuple[list[Experience], int]:
        query = sa.select(self.exp.c.id, self.exp.c.data).where(self.exp.c.id > after).order_by(self.exp.c.id)
        rows = conn.execute(query.limit(n)).all()
        if not rows:
            return [], after
        return [deserialize_experience(data, self.trust_pickled_rows) for _, data in rows], rows[-1][0]

    def fetch(self, after: int, n: int) -> tuple[list[Experience], int]:
        with self.db.connect() as conn:
            return self._fetch(conn, after, n)

    def _cursor(self, conn: sa.Connection, reader: str, lock: bool = False) -> int:
        if lock and self.postgres:  # a row to lock, so that readers sharing the name take turns
            new = {"reader": reader, "position": 0, "progress": 0, "generation": 0}
            conn.execute(postgresql.insert(self.cursors).values(**new).on_conflict_do_nothing())
        query = sa.select(self.cursors.c.position).where(self.cursors.c.reader == reader)
        found = conn.execute(query.with_for_update() if lock else query).scalar()
        return int(found or 0)

    def claim(self, reader: str, n: int) -> tuple[list[Experience], int]:
        with self.db.write() as conn:
            after = self._cursor(conn, reader, lock=True)
            experiences, position = self._fetch(conn, after, n)
            if experiences:
                values = {"position": position, "progress": position}
                self._upsert(conn, self.cursors, {"reader": reader}, values, generation=0)
        return experiences, position

    def cursor(self, reader: str) -> int:
        with self.db.connect() as conn:
            return self._cursor(conn, reader)

    def set_cursor(self, reader: str, position: int, lease: Lease | None = None) -> None:
        with self.db.write() as conn:
            if lease:
                self._check(conn, lease)
            values = {"position": position, "progress": position}
            self._upsert(conn, self.cursors, {"reader": reader}, values, generation=0)

    def set_progress(self, reader: str, position: int, lease: Lease | None = None) -> None:
        with self.db.write() as conn:
            if lease:
                self._check(conn, lease)
            self._upsert(conn, self.cursors, {"reader": reader}, {"progress": position}, position=0, generation=0)

    def unread(self) -> int:
        last = sa.select(sa.func.max(self.exp.c.id)).scalar_subquery()
        slowest = sa.select(sa.func.min(self.cursors.c.progress)).scalar_subquery()
        with self.db.connect() as conn:  # one statement: one round trip to a server
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
        durability = getattr(self.storage, "durability", "fast")
        trusted = getattr(self.storage, "trust_pickled_rows", False)  # experience buffers have it, tasksets not
        return SqlLog(self.url, self.storage.name, durability, Reconnect.of(self.storage), trusted)

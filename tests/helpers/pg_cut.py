"""A TCP proxy in front of a PostgreSQL server that cuts a client's connection at its COMMIT, as
a network drop or a server crash at that moment would, for the tests of a commit whose outcome
the client cannot know.

``CommitCutter(port)`` listens on a port of its own (``url``) and passes every connection on to
the server at ``port``. After ``cut_next("lost")`` the next COMMIT a client sends never reaches
the server: the connection drops and the server rolls the transaction back. After
``cut_next("landed")`` the COMMIT reaches the server, which commits and replies, and the
connection drops before the reply reaches the client. Either way the client sees the same
error: the server closed the connection. With ``and_go_down``, every connection after the cut
is dropped at once too, as from a server that is gone, until ``come_back()``.
"""

from __future__ import annotations

import asyncio
import threading

from helpers.ports import free_port

_COMMIT = b"COMMIT\x00"
"""How the statement ends in the frontend protocol (a Query or Parse message)."""


class CommitCutter:
    def __init__(self, server_port: int):
        self.server_port, self.port = server_port, free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.cuts: list[str] = []
        self._next: str | None = None
        self._go_down = self.down = False
        self._open: set[asyncio.StreamWriter] = set()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    def cut_next(self, how: str, and_go_down: bool = False) -> None:
        """Cut the next connection that sends COMMIT: ``lost`` (before the server has it) or
        ``landed`` (after the server committed, before the client has the reply)."""
        assert how in ("lost", "landed"), how
        with self._lock:
            self._next, self._go_down = how, and_go_down

    def come_back(self) -> None:
        """Pass new connections on again after ``cut_next(..., and_go_down=True)``."""
        self.down = False

    def close(self) -> None:
        """Stop listening and drop every connection still open."""
        asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shut(self) -> None:
        self._server.close()
        for stream in list(self._open):
            stream.transport.abort()
        relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if relays:
            await asyncio.wait(relays, timeout=5)

    def __enter__(self) -> CommitCutter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, chunk: bytes) -> str | None:
        with self._lock:
            if self._next is None or _COMMIT not in chunk:
                return None
            how, self._next = self._next, None
            self.down = self._go_down
        self.cuts.append(how)
        return how

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", self.port))
        started.set()
        self._loop.run_forever()

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        if self.down:
            client_out.transport.abort()
            return
        server_in, server_out = await asyncio.open_connection("127.0.0.1", self.server_port)
        self._open |= {client_out, server_out}
        drop_reply = asyncio.Event()

        def cut() -> None:
            client_out.transport.abort()
            server_out.transport.abort()

        async def to_server() -> None:
            while chunk := await client_in.read(1 << 16):
                how = self._take(chunk)
                if how == "lost":
                    return cut()
                if how == "landed":
                    drop_reply.set()
                server_out.write(chunk)
                await server_out.drain()
            server_out.close()

        async def to_client() -> None:
            while chunk := await server_in.read(1 << 16):
                if drop_reply.is_set():  # the server's answer to the COMMIT: it committed
                    return cut()
                client_out.write(chunk)
                await client_out.drain()
            client_out.close()

        await asyncio.gather(to_server(), to_client(), return_exceptions=True)
        cut()
        self._open -= {client_out, server_out}

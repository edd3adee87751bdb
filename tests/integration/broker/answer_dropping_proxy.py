"""A TCP proxy between clients and a broker that can lose the broker's next answer: it
closes the client's connection instead of forwarding it, after the broker has already acted
on the request — the case an idempotent producer's retry must survive. The broker must
advertise the proxy's address, or clients follow METADATA straight past it.

`drop_answer_to(api, then)` loses the answer to the next request of one API only, and runs
`then()` (another client's request, say) before the client sees its connection close: the
client's retry comes strictly after it. It reads the api number from the start of each chunk
the client sends, so it expects one request in flight at a time (an admin client's)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

_API = struct.Struct(">H")  # after the u32 length of a Kaska request header


class AnswerDroppingProxy:
    def __init__(self) -> None:
        self.upstream: tuple[str, int] | None = None  # set before the first client connects
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._drop_next = threading.Event()
        self._drop_api: int | None = None
        self._then: Callable[[], None] | None = None
        self.dropped = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def drop_next_answer(self) -> None:
        self.dropped.clear()
        self._drop_next.set()

    def drop_answer_to(self, api: int, then: Callable[[], None] | None = None) -> None:
        self.dropped.clear()
        self._then = then
        self._drop_api = api

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if not answers and self._drop_api is not None and len(data) >= 6 \
                        and _API.unpack_from(data, 4)[0] == self._drop_api:
                    self._drop_api = None
                    self._drop_next.set()
                if answers and self._drop_next.is_set():
                    self._drop_next.clear()
                    then, self._then = self._then, None
                    if then is not None:
                        then()
                    self.dropped.set()
                    break
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

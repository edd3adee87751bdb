"""One named Kafka listener of a broker: an Acceptor (../network/acceptor.py: bounds, timeouts,
lifecycle) serving KafkaConnections over that listener's KafkaContext (its own advertised
addresses; context.py), on one of `--kafka-listeners`. A broker has one per name, each its own
socket and its own connection bound (`--connections-max`).

Driven by BrokerServer beside Kaska's own acceptor: `bind()` before recovery, `start(kctx)` once
the broker's context exists, on shutdown `stop_accepting()` (which also stops the group
coordinator, so joins and syncs waiting on their group's answer return at once; every listener
shares it and stopping it twice is harmless), then `interrupt_all()` and `finish(grace_s)`.

Thread-safe as Acceptor is.
"""

from __future__ import annotations

from services.broker.kafka.connection import KafkaConnection
from services.broker.kafka.context import KafkaContext
from services.broker.network.acceptor import Acceptor


class KafkaListener(Acceptor):
    def __init__(self, listener: str, host: str, port: int, *, connections_max: int,
                 read_timeout_s: float, request_bytes_max: int, backlog: int) -> None:
        """`listener`: its name (INTERNAL); log lines, threads and metrics say kafka-INTERNAL."""
        super().__init__(host, port, name=f"kafka-{listener}", connections_max=connections_max,
                         read_timeout_s=read_timeout_s, backlog=backlog,
                         accept_thread_name=f"kafka-accept-{listener}")
        self.listener = listener
        self._request_bytes_max = request_bytes_max
        self._kctx: KafkaContext | None = None

    def start(self, kctx: KafkaContext) -> None:  # type: ignore[override]
        assert kctx.listener == self.listener, "a listener serves its own context"
        self._kctx = kctx
        super().start(lambda sock, peer, forget: KafkaConnection(
            sock, peer, kctx, forget, self._request_bytes_max))

    def stop_accepting(self) -> None:
        if self._kctx is not None:
            self._kctx.consumer_groups.stop()
        super().stop_accepting()

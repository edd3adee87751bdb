"""The Kafka listener of one broker: an Acceptor (../network/acceptor.py: bounds, timeouts,
lifecycle) serving KafkaConnections over the broker's KafkaContext, on `--kafka-listen`.

Driven by BrokerServer beside Kaska's own acceptor: `bind()` before recovery, `start(kctx)` once
the broker's context exists, on shutdown `stop_accepting()` (which also stops the group
coordinator, so joins and syncs waiting on their group's answer return at once), then
`interrupt_all()` and `finish(grace_s)`.

Thread-safe as Acceptor is.
"""

from __future__ import annotations

from services.broker.kafka.connection import KafkaConnection
from services.broker.kafka.context import KafkaContext
from services.broker.network.acceptor import Acceptor


class KafkaListener(Acceptor):
    def __init__(self, host: str, port: int, *, connections_max: int, read_timeout_s: float,
                 request_bytes_max: int, backlog: int) -> None:
        super().__init__(host, port, name="kafka", connections_max=connections_max,
                         read_timeout_s=read_timeout_s, backlog=backlog)
        self._request_bytes_max = request_bytes_max
        self._kctx: KafkaContext | None = None

    def start(self, kctx: KafkaContext) -> None:  # type: ignore[override]
        self._kctx = kctx
        super().start(lambda sock, peer, forget: KafkaConnection(
            sock, peer, kctx, forget, self._request_bytes_max))

    def stop_accepting(self) -> None:
        if self._kctx is not None:
            self._kctx.consumer_groups.stop()
        super().stop_accepting()

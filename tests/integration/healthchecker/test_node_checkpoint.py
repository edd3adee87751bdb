"""A health checker node in-process: restart counts and back-off survive the node's own restart,
and a heartbeat connection closed without a goodbye is a restart at once."""

import pytest

from common.heartbeat import HeartbeatSender
from healthchecker.bully import ElectionConfig
from healthchecker.node import HealthCheckerNode, NodeConfig
from healthchecker.restarter import ACTION_STARTED, Restarter, RestartOutcome
from healthchecker.supervision import Phase, SupervisionConfig
from tests.integration.healthchecker.local_cluster import free_ports, wait_until

pytestmark = pytest.mark.integration


class RecordingRestarter(Restarter):
    def __init__(self):
        self.calls = []

    def restart(self, name, cause):
        self.calls.append((name, cause))
        return RestartOutcome(name, ACTION_STARTED, "recorded")

    def expected_services(self):
        return set()


def _node(checkpoint_dir, port, restarter) -> HealthCheckerNode:
    config = NodeConfig(
        node_id=1,
        name="healthchecker-1",
        listen=("127.0.0.1", port),
        peers={},
        heartbeat_listen=("127.0.0.1", port),
        heartbeat_peers=(),
        secret=b"s",
        election=ElectionConfig(1, frozenset(), healthcheck_interval_s=0.1),
        supervision=SupervisionConfig(
            "healthchecker-1", heartbeat_timeout_s=30.0, start_deadline_s=30.0,
            backoff_base_s=5.0, backoff_max_s=5.0, stable_after_s=60.0,
        ),
        supervise_interval_s=0.02,
        checkpoint_dir=str(checkpoint_dir),
    )
    return HealthCheckerNode(config, restarter)


def test_restart_counts_survive_a_node_restart(tmp_path):
    (port,) = free_ports(1)
    first_restarter = RecordingRestarter()
    node = _node(tmp_path, port, first_restarter).start()
    try:
        sender = HeartbeatSender("svc", targets=[("127.0.0.1", port)], interval_s=0.05,
                                 secret=b"s").start()
        wait_until(lambda: "svc" in node.table.snapshot(), 2)
        sender.stop(say_goodbye=False)  # dies: its connection closes without a goodbye
        # Restarted long before the (30 s) heartbeat timeout: the lost connection is enough.
        wait_until(lambda: first_restarter.calls, 10)
    finally:
        node.stop()
    assert first_restarter.calls[0][0] == "svc"
    assert "connection closed without a goodbye" in first_restarter.calls[0][1]

    second_restarter = RecordingRestarter()
    node = _node(tmp_path, port, second_restarter)
    record = node.supervision_state.records["svc"]
    assert (record.phase, record.restart_count, record.flaps) == (Phase.UNKNOWN, 1, 0)
    node.start()
    try:
        sender = HeartbeatSender("svc", targets=[("127.0.0.1", port)], interval_s=0.05,
                                 secret=b"s").start()
        wait_until(lambda: "svc" in node.table.snapshot(), 5)
        sender.stop(say_goodbye=False)
        wait_until(lambda: second_restarter.calls, 10)
        restarted = node.supervision_state.records["svc"]
    finally:
        node.stop()
    assert restarted.restart_count == 2
    assert restarted.flaps == 1, "the restart before the node's own restart still counts"

"""A health checker node in-process: restart counts and back-off survive the node's own restart."""

import pytest

from common.heartbeat import HeartbeatSender
from healthchecker.bully import ElectionConfig
from healthchecker.node import HealthCheckerNode, NodeConfig
from healthchecker.restarter import ACTION_STARTED, Restarter, RestartOutcome
from healthchecker.supervisor import SupervisorConfig
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
        supervisor=SupervisorConfig(
            "healthchecker-1", heartbeat_timeout_s=0.3, restart_grace_s=0.2,
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
        sender = HeartbeatSender("svc", targets=[("127.0.0.1", port)], interval_s=0.05).start()
        wait_until(lambda: "svc" in node.table.snapshot(), 2)
        sender.stop(say_goodbye=False)  # dies
        wait_until(lambda: first_restarter.calls, 3)
    finally:
        node.stop()
    assert first_restarter.calls[0][0] == "svc"

    second_restarter = RecordingRestarter()
    node = _node(tmp_path, port, second_restarter)
    record = node.supervisor_state.records["svc"]
    assert (record.restart_count, record.flaps) == (1, 0)
    node.start()
    try:
        sender = HeartbeatSender("svc", targets=[("127.0.0.1", port)], interval_s=0.05).start()
        wait_until(lambda: "svc" in node.table.snapshot(), 2)
        sender.stop(say_goodbye=False)
        wait_until(lambda: second_restarter.calls, 3)
        restarted = node.supervisor_state.records["svc"]
    finally:
        node.stop()
    assert restarted.restart_count == 2
    assert restarted.flaps == 1, "the restart before the node's own restart still counts"

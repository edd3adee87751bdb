"""Fixtures of the replication fault tests: clusters torn down after each test, and on a
failure the tail of every broker's log in the report."""

from __future__ import annotations

import pytest

from tests.integration.replication.cluster import BrokerCluster

LOG_TAIL_BYTES = 6000


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def make_cluster(tmp_path, request):
    """`make_cluster(size=3, peer_via_proxy=False, extra_args=(), groups=1)` -> a started
    cluster."""
    clusters: list[BrokerCluster] = []

    def make(size: int = 3, peer_via_proxy: bool = False,
             extra_args: tuple[str, ...] = (), groups: int = 1) -> BrokerCluster:
        cluster = BrokerCluster(tmp_path / f"cluster{len(clusters)}", size=size,
                                peer_via_proxy=peer_via_proxy, extra_args=extra_args,
                                groups=groups)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.close()
    if request.node.stash.get(_FAILED, False):
        for cluster in clusters:
            for i, path in cluster.log_paths().items():
                tail = path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace") \
                    if path.exists() else "(no log)"
                print(f"\n----- broker {i} log ({path}), last {LOG_TAIL_BYTES} bytes -----\n"
                      f"{tail}")

"""Broker fixtures: one shared broker per module, fresh ones for restart tests."""

import itertools
import uuid

import pytest

from tests.integration.broker.broker_process import BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield process
    process.kill()


@pytest.fixture
def fresh_broker(tmp_path):
    processes = []

    def make(*extra_args: str) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"data{len(processes)}", *extra_args).start()
        processes.append(process)
        return process

    yield make
    for process in processes:
        process.kill()


@pytest.fixture
def topic_name():
    """A topic name no other test uses."""
    return f"t{next(_names)}-{uuid.uuid4().hex[:8]}"

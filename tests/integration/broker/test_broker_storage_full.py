"""A real broker whose data directory fills up (an 8 MiB tmpfs): produce is refused with the
storage error instead of the broker dying of SIGBUS, reads go on, a restart on the full disk
does not kill it either, and once space is freed produce succeeds again, every acknowledged
record read back exactly once."""

from __future__ import annotations

import errno
import subprocess
import time
from pathlib import Path

import pytest

from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import KaskaStorageError
from tests.conftest import running_in_ci
from tests.integration.broker.broker_process import (
    CLIENT_OPTIONS,
    FAST_FAIL_OPTIONS,
    BrokerProcess,
)

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
TMPFS_BYTES = 8 * MIB
FILLER_BYTES = 3 * MIB  # written before the broker starts, deleted to free space
PAYLOAD_BYTES = 64 * 1024
BATCHES_MAX = TMPFS_BYTES // PAYLOAD_BYTES  # the disk is full long before this
TOPIC = "full"
EPISODE_LINE = "produce refused until space is freed"


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                              str(mount)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        reason = (f"cannot mount a tmpfs here (an environment limit; the unit tests cover "
                  f"the logic): {mounted.stderr.strip() or mounted.returncode}")
        if running_in_ci():
            pytest.fail(reason)  # CI runs as root: a refused mount is a broken run
        pytest.skip(reason)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def _payload(n: int) -> bytes:
    return b"%08d|" % n + bytes(PAYLOAD_BYTES - 9)


def _fill_to_the_brim(path: Path) -> None:
    """Take the last free pages, so that the broker has not a byte left."""
    with open(path, "wb", buffering=0) as out:
        while True:
            try:
                out.write(bytes(4096))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


def _read_all(address: str) -> list[bytes]:
    with Consumer(address, group="check", **CLIENT_OPTIONS) as consumer:
        end = consumer.end_offset(TOPIC)
        consumer.seek(TOPIC, 0)
        return [consumer.poll(10).value for _ in range(end)]


def _episodes_logged(broker: BrokerProcess) -> int:
    return broker.log_path.read_text(errors="replace").count(EPISODE_LINE)


def _produce(producer: Producer, acked: list[bytes], count: int) -> None:
    for _ in range(count):
        producer.send_batch(TOPIC, 0, [_payload(len(acked))])
        acked.append(_payload(len(acked)))


def test_full_disk_refuses_produce_serves_reads_and_resumes(small_tmpfs, tmp_path):
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"\xff" * FILLER_BYTES)
    broker = BrokerProcess(small_tmpfs / "data", "--segment-bytes-max", str(MIB))
    broker.log_path = tmp_path / "broker.log"  # the broker's log must not take tmpfs pages
    broker.start()
    try:
        with Admin(broker.address, **CLIENT_OPTIONS) as admin:
            admin.create_topic(TOPIC, 1)
        acked: list[bytes] = []
        with Producer(broker.address, **FAST_FAIL_OPTIONS) as producer:
            for _ in range(BATCHES_MAX):
                try:
                    _produce(producer, acked, 1)
                except KaskaStorageError:
                    break
            else:
                pytest.fail(f"{BATCHES_MAX} batches fitted an {TMPFS_BYTES} B tmpfs")
            for _ in range(3):  # more refusals: the same episode, not one log line each
                with pytest.raises(KaskaStorageError):
                    _produce(producer, acked, 1)
            assert broker.alive(), broker.tail()
            assert _read_all(broker.address) == acked  # reads served on the full disk
            assert _episodes_logged(broker) == 1
            full_at = len(acked)

            filler.unlink()
            freed_at = time.monotonic()
            _produce(producer, acked, 1)  # the very next produce reserves again
            resumed_s = time.monotonic() - freed_at
            _produce(producer, acked, 4)
        print(f"\n{full_at} batches of {PAYLOAD_BYTES} B acknowledged before the disk was "
              f"full; produce resumed {resumed_s * 1000:.1f} ms after space was freed")
        assert _read_all(broker.address) == acked  # each acknowledged batch exactly once

        # Restarted on a disk full to the last byte: recovery, reconcile and the election's
        # vote must not kill it. (A start gives back the room its active segments reserved
        # ahead, so the disk is filled after one restart and before the next.)
        broker.restart()
        brim = small_tmpfs / "brim"
        _fill_to_the_brim(brim)
        episodes = _episodes_logged(broker)
        broker.restart()
        assert broker.alive(), broker.tail()
        assert _episodes_logged(broker) > episodes, broker.tail()  # its vote was refused
        brim.unlink()
        freed_at = time.monotonic()
        with Producer(broker.address, **CLIENT_OPTIONS) as producer:
            _produce(producer, acked, 1)
            resumed_s = time.monotonic() - freed_at
            _produce(producer, acked, 4)
        print(f"after a restart on the full disk, produce resumed {resumed_s:.2f} s after "
              "space was freed")
        assert _read_all(broker.address) == acked
        assert broker.alive()
    finally:
        broker.kill()

"""Broker throughput against the raw loopback ceilings, measured in one run.

    python -m scripts.bench_broker [--records N] [--record-bytes B] [--batch-bytes 1048576]
        [--fetch-bytes 1048576] [--in-flight 4] [--repeats 5]

Starts a broker (a child process, any free port, a temporary data directory) and two helper
processes, then `repeats` times, interleaved so that the machine's noise is shared:
  (a) ceiling-in:  this process sends the produce volume over 127.0.0.1 to a helper process
                   that `recv_into()`s it straight into a preallocated, mmap'd file (what a
                   broker does at best on produce);
  (b) produce:     N records of B bytes, pre-encoded as idempotent record batches of about
                   `batch-bytes` (encoding is the producer's cost, not the broker's), sent
                   over one connection with up to `in-flight` requests unanswered (a Kafka
                   producer's default is 5; the client Producer here sends one at a time:
                   `--in-flight 1` measures that);
  (c) ceiling-out: a helper process `os.sendfile()`s the same volume from a file (in the page
                   cache) to this process, which `recv_into()`s a reused buffer;
  (d) consume:     FETCH requests of up to `fetch-bytes` from offset 0 to the end; every batch
                   is CRC-checked and its records counted (splitting out every record is
                   the application's business; `consume_decoded_records_per_s` reports a
                   consume that does it too, once, after the last round).
Each round writes a fresh topic and deletes it afterwards. The client is always this process
and the server another one, for the ceilings as for the broker.

Prints one JSON line: medians over the repeats. MB are 10^6 bytes: broker figures count
record payload (N * B), the ceilings count the bytes they moved (the encoded batches, ~4 %
more at 100-byte records); `*_vs_ceiling` compare the same volume (ceiling time / broker
time), so they are fair ratios. `server_cpu_s_per_gb` is the CPU time the serving process
(broker, or the helper for a ceiling) spent per GB moved: unlike wall time it hardly moves
when other work shares the machine.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from common.kaska.consumer import FETCH_BYTES_MAX_DEFAULT
from scripts.bench import replication
from scripts.bench.broker import (
    BATCH_BYTES_MAX,
    IN_FLIGHT_DEFAULT,
    BrokerBenchSettings,
    helper_main,
    run,
)
from scripts.bench.replication import ReplicationSettings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_broker",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--fetch-bytes", type=int, default=FETCH_BYTES_MAX_DEFAULT,
                        help="max_bytes of each FETCH (default: the Consumer's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT_DEFAULT,
                        help="produce requests unanswered at a time (1: the client Producer "
                             "today)")
    parser.add_argument("--brokers", type=int, default=1,
                        help="3 (or any odd N > 1): produce to a replicated cluster, acks=all and "
                             "acks=1, side by side with a lone broker (scripts/bench_replication)")
    parser.add_argument("--serve", choices=("mmap-sink", "sendfile-source"),
                        help=argparse.SUPPRESS)  # the helper processes
    parser.add_argument("--where", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is None and (args.records < 1 or args.record_bytes < 0
                               or args.batch_bytes < 1 or args.repeats < 1
                               or args.fetch_bytes < 1 or args.in_flight < 1):
        parser.error("records, batch bytes, fetch bytes, in-flight and repeats must be "
                     "positive")
    if args.brokers < 1 or args.brokers % 2 == 0:
        parser.error("--brokers must be odd and positive")
    if args.batch_bytes > BATCH_BYTES_MAX:
        parser.error(f"--batch-bytes above {BATCH_BYTES_MAX}: a batch must fit a broker segment")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve is not None:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        return helper_main(args.serve, args.where)
    if args.brokers > 1:
        settings = ReplicationSettings(args.brokers, args.records, args.record_bytes,
                                       args.batch_bytes, args.in_flight, args.repeats,
                                       failovers=0)
        print(json.dumps(replication.bench(settings)), flush=True)
        return 0
    settings = BrokerBenchSettings(args.records, args.record_bytes, args.batch_bytes,
                                   args.fetch_bytes, args.in_flight, args.repeats)
    print(json.dumps(run(settings)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

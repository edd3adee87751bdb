"""The Kafka listener's costs: transcoding per MB for both on-disk format designs, and the
broker's CPU per MB end to end, Kafka's protocol against Kaska's.

    python -m scripts.bench_kafka [--record-bytes 100,1000] [--repeats 5]
        [--end-to-end-records 200000] [--brokers 1,3] [--codecs lz4,zstd]

See scripts/bench/kafka_transcode.py and scripts/bench/kafka_clients.py for what each figure
is; docs/kafka.md quotes a run. Prints one JSON line per record size and step kind
(`--end-to-end-records 0` skips the end-to-end part).
"""

from __future__ import annotations

import argparse
import json

from scripts.bench import kafka_clients
from scripts.bench.kafka_transcode import measure


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_kafka",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--record-bytes", default="100,1000",
                        help="comma-separated record value sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--end-to-end-records", type=int, default=200_000,
                        help="records per end-to-end round (0: transcoding only)")
    parser.add_argument("--brokers", default="1,3",
                        help="comma-separated cluster sizes for the end-to-end rounds")
    parser.add_argument("--codecs", default="lz4,zstd",
                        help="comma-separated Kafka compression types of the compressed "
                             "end-to-end steps (empty: none)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(text) for text in args.record_bytes.split(",")]
    codecs = tuple(text for text in args.codecs.split(",") if text)
    for size in sizes:
        print(json.dumps({"transcoding": True, "record_bytes": size,
                          **measure(size, args.repeats)}), flush=True)
    if args.end_to_end_records:
        for brokers in (int(text) for text in args.brokers.split(",")):
            for size in sizes:
                print(json.dumps({"end_to_end": True, **kafka_clients.run(
                    args.end_to_end_records, size, max(1, args.repeats // 2), brokers,
                    codecs)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

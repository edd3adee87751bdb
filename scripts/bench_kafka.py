"""The Kafka listener's transcoding cost, per MB, for both on-disk format designs.

    python -m scripts.bench_kafka [--record-bytes 100,1000] [--repeats 5]

See scripts/bench/kafka_transcode.py for what each figure is; docs/kafka.md quotes a run.
Prints one JSON line per record size.
"""

from __future__ import annotations

import argparse
import json

from scripts.bench.kafka_transcode import measure


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench_kafka",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--record-bytes", default="100,1000",
                        help="comma-separated record value sizes")
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for size in (int(text) for text in args.record_bytes.split(",")):
        print(json.dumps({"record_bytes": size, **measure(size, args.repeats)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

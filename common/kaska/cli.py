"""`python -m common.kaska topics|produce|consume|offsets` — kafka-topics and the console
producer/consumer, for Kaska.

    python -m common.kaska --brokers H:P topics [--create NAME [--partitions N]] [--delete NAME]
    python -m common.kaska --brokers H:P produce --topic T [--partition P]   (stdin lines)
    python -m common.kaska --brokers H:P consume --topic T [--partition P]
        [--from-beginning | --offset N] [--group G] [--max-messages N] [--idle-timeout-s S]
        [--commit]
    python -m common.kaska --brokers H:P offsets --topic T [--group G]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from time import monotonic

from common.kaska.admin import Admin
from common.kaska.consumer import Consumer
from common.kaska.errors import KaskaError
from common.kaska.producer import Producer

BROKERS_ENV = "KASKA_BROKERS"
TOKEN_ENV = "KASKA_TOKEN"
POLL_SLICE_S = 1.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m common.kaska", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", default=os.environ.get(BROKERS_ENV, "127.0.0.1:9092"),
                        help=f"H:P[,H:P] (default: ${BROKERS_ENV} or 127.0.0.1:9092)")
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                        help=f"shared broker token (default: ${TOKEN_ENV})")
    commands = parser.add_subparsers(dest="command", required=True)

    topics = commands.add_parser("topics", help="list, create or delete topics")
    topics.add_argument("--create", metavar="NAME")
    topics.add_argument("--partitions", type=int, default=1)
    topics.add_argument("--delete", metavar="NAME")

    produce = commands.add_parser("produce", help="one record per stdin line")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, default=0)
    produce.add_argument("--batch-records", type=int, default=1000)

    consume = commands.add_parser("consume", help="print records, one per line")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, default=None,
                         help="only this partition (default: all)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, default=None)
    consume.add_argument("--group", default="console")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--idle-timeout-s", type=float, default=None,
                         help="stop after this long without a record (default: never)")
    consume.add_argument("--commit", action="store_true",
                         help="commit the positions reached when done")

    offsets = commands.add_parser("offsets", help="start, end and committed offsets")
    offsets.add_argument("--topic", required=True)
    offsets.add_argument("--group", default="console")
    return parser


def _topics(args, out) -> None:
    with Admin(args.brokers, token=args.token) as admin:
        if args.create:
            admin.create_topic(args.create, args.partitions)
            print(f"created {args.create} ({args.partitions} partitions)", file=out)
        if args.delete:
            admin.delete_topic(args.delete)
            print(f"deleted {args.delete}", file=out)
        if not args.create and not args.delete:
            for name, partitions in sorted(admin.topics().items()):
                print(f"{name}\t{partitions}", file=out)


def _produce(args, stdin, out) -> None:
    count = 0
    with Producer(args.brokers, token=args.token, batch_records_max=args.batch_records) as p:
        for line in stdin:
            p.send(args.topic, line.rstrip(b"\r\n"), args.partition)
            count += 1
    print(f"produced {count} records to {args.topic}/{args.partition}", file=out)


def _position_consumer(consumer: Consumer, args) -> None:
    if args.partition is None:
        consumer.subscribe(args.topic)
        partitions = [p for _topic, p in consumer.assignment()]
    else:
        partitions = [args.partition]
    for p in partitions:
        if args.from_beginning:
            consumer.seek(args.topic, consumer.start_offset(args.topic, p), p)
        elif args.offset is not None:
            consumer.seek(args.topic, args.offset, p)
        elif args.partition is not None:
            # Like subscribe: the group's committed offset, else only new records.
            committed = consumer.committed(args.topic, p)
            start = committed if committed is not None else consumer.end_offset(args.topic, p)
            consumer.seek(args.topic, start, p)


def _consume(args, stdout_bytes) -> None:
    with Consumer(args.brokers, group=args.group, token=args.token) as consumer:
        _position_consumer(consumer, args)
        received = 0
        idle_since = monotonic()
        while args.max_messages is None or received < args.max_messages:
            slice_s = POLL_SLICE_S
            if args.idle_timeout_s is not None:
                slice_s = min(slice_s, max(0.0, idle_since + args.idle_timeout_s - monotonic()))
            message = consumer.poll(slice_s)
            if message is None:
                if (args.idle_timeout_s is not None
                        and monotonic() - idle_since >= args.idle_timeout_s):
                    break
                continue
            stdout_bytes.write(message.value + b"\n")
            stdout_bytes.flush()
            received += 1
            idle_since = monotonic()
        if args.commit:
            for topic, partition in consumer.assignment():
                consumer.commit(topic, consumer.position(topic, partition), partition)


def _offsets(args, out) -> None:
    with Consumer(args.brokers, group=args.group, token=args.token) as consumer, \
            Admin(args.brokers, token=args.token) as admin:
        partitions = admin.topics(include_internal=True).get(args.topic)
        if partitions is None:
            raise SystemExit(f"no topic {args.topic}")
        print("partition\tstart\tend\tcommitted", file=out)
        for p in range(partitions):
            committed = consumer.committed(args.topic, p)
            print(f"{p}\t{consumer.start_offset(args.topic, p)}\t"
                  f"{consumer.end_offset(args.topic, p)}\t"
                  f"{'-' if committed is None else committed}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "topics":
            _topics(args, sys.stdout)
        elif args.command == "produce":
            _produce(args, sys.stdin.buffer, sys.stderr)
        elif args.command == "consume":
            _consume(args, sys.stdout.buffer)
        else:
            _offsets(args, sys.stdout)
    except KaskaError as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0

"""`python -m common.probe URL` and `python -m common.probe kaska HOST:PORT`: is this service
alive? For Compose healthchecks and operators.

- URL (e.g. http://broker-1:9400/healthz): GET it; exit 0 on a 2xx answer within
  `--timeout-s`, 1 otherwise.
- `kaska HOST:PORT`: send the broker one real Kaska request (METADATA for the internal
  `__offsets` topic: every broker holds it, and the answer is a few dozen bytes) with the
  client library (common/kaska/connection.py); exit 0 when it is answered within
  `--timeout-s`, 1 otherwise. For brokers that serve no metrics port.

Either way a failure prints one line on stderr saying why (exit 1); success prints one line
on stdout (exit 0); bad usage exits 2. `--timeout-s` bounds each wait (connect, answer): a
SIGSTOPped process accepts the connection (its kernel does) and answers nothing, which only a
deadline sees.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request

from common.address import AddressError, parse_host_port
from common.config_flags import positive_s

TIMEOUT_S_DEFAULT = 3.0
# The brokers' client token variable, as common/kaska/cli.py names it (a test holds the two
# equal): importing the Kaska client here would triple the URL probe's start-up CPU.
TOKEN_ENV = "KASKA_TOKEN"
KASKA = "kaska"
# The internal topic every broker makes for itself (committed offsets): a real request with a
# small answer, whatever topics the cluster holds.
PROBE_TOPIC = "__offsets"
REASON_CHARS_MAX = 200  # of an error answer's body quoted on stderr

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1


class ProbeFailed(Exception):
    """The probed service did not answer well in time; the message says why."""


def probe_http(url: str, timeout_s: float) -> str:
    """What a 2xx answer of GET `url` said (its first line); ProbeFailed otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return f"HTTP {answer.status}: {_first_line(answer.read(REASON_CHARS_MAX))}"
    except urllib.error.HTTPError as error:
        raise ProbeFailed(f"HTTP {error.code} from {url}: "
                          f"{_first_line(error.read(REASON_CHARS_MAX))}") from error
    except urllib.error.URLError as error:
        raise ProbeFailed(f"{url}: {error.reason}") from error
    except TimeoutError as error:
        raise ProbeFailed(f"{url}: no answer within {timeout_s:g} s") from error
    except OSError as error:  # a reset or a broken answer mid-read
        raise ProbeFailed(f"{url}: {error}") from error


def probe_kaska(address: tuple[str, int], timeout_s: float, token: str | None = None) -> str:
    """One METADATA request answered within `timeout_s` (all told); ProbeFailed otherwise."""
    # Imported here, not at the top: Compose runs the URL probe in every container every few
    # seconds, and the Kaska client's imports would triple its start-up CPU.
    from common.kaska.connection import BrokerConnection
    from common.kaska.errors import KaskaError
    from common.kaska.protocol.metadata import MetadataRequest

    deadline_s = time.monotonic() + timeout_s
    where = f"kaska broker {address[0]}:{address[1]}"
    try:
        connection = BrokerConnection(address, token=token, connect_timeout_s=timeout_s,
                                      request_timeout_s=timeout_s)
    except KaskaError as error:
        raise ProbeFailed(f"{where}: {type(error).__name__}: {error}") from error
    try:
        answer = connection.request(MetadataRequest((PROBE_TOPIC,)),
                                    max(deadline_s - time.monotonic(), 0.001))
    except KaskaError as error:
        raise ProbeFailed(f"{where}: {type(error).__name__}: {error}") from error
    finally:
        connection.close("probe done")
    return (f"{where} answered METADATA: {len(answer.brokers)} brokers, controller "
            f"{answer.controller_id}")


def _first_line(body: bytes) -> str:
    lines = body.decode(errors="replace").strip().splitlines()
    return lines[0] if lines else "(empty body)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m common.probe",
        usage="python -m common.probe [--timeout-s S] URL\n"
              "       python -m common.probe [--timeout-s S] [--token T] kaska HOST:PORT",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="URL|kaska",
                        help="an http(s) URL, or the word 'kaska' followed by HOST:PORT")
    parser.add_argument("address", nargs="?", metavar="HOST:PORT",
                        help="with 'kaska': the broker's Kaska listener")
    parser.add_argument("--timeout-s", type=positive_s, default=TIMEOUT_S_DEFAULT,
                        help="how long to wait for the connection and for the answer (default "
                             f"{TIMEOUT_S_DEFAULT:g})")
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                        help=f"with 'kaska': the brokers' client token (default ${TOKEN_ENV})")
    args = parser.parse_args(argv)
    if args.target == KASKA:
        if args.address is None:
            parser.error("kaska needs HOST:PORT")
        try:
            args.address = parse_host_port(args.address)
        except AddressError as error:
            parser.error(f"kaska HOST:PORT: {error}")
    elif args.address is not None:
        parser.error(f"unexpected {args.address!r} after a URL")
    elif not args.target.startswith(("http://", "https://")):
        parser.error(f"{args.target!r} is neither an http(s) URL nor 'kaska'")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.target == KASKA:
            said = probe_kaska(args.address, args.timeout_s, args.token)
        else:
            said = probe_http(args.target, args.timeout_s)
    except ProbeFailed as failed:
        print(f"unhealthy: {failed}", file=sys.stderr)
        return EXIT_UNHEALTHY
    print(f"healthy: {said}")
    return EXIT_HEALTHY


if __name__ == "__main__":
    sys.exit(main())

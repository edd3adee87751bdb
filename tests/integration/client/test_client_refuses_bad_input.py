"""`python -m client` as a process refuses a file it cannot use before it opens a session: exit
2, one line on stderr naming the file, nothing on stdout, and no connection to the brokers (a
listening socket at the --brokers address is never connected to)."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.client.input_samples import AIRPORTS_TEXT, FLIGHTS_TEXT

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
CLIENT_TIMEOUT_S = 60


@pytest.fixture
def listener():
    """A socket listening on an unused 127.0.0.1 port, standing in for a broker."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


def client_command(tmp_path: Path, listener: socket.socket, flights: Path,
                   airports: Path) -> list[str]:
    host, port = listener.getsockname()
    return [sys.executable, "-m", "client", "--flights", str(flights),
            "--airports", str(airports), "--brokers", f"{host}:{port}",
            "--results-dir", str(tmp_path / "results"), "--stall-timeout-s", "5"]


def run_client(*args) -> subprocess.CompletedProcess:
    return subprocess.run(client_command(*args), cwd=REPO, capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S, check=False)


def assert_never_connected(listener: socket.socket) -> None:
    # The client has exited: a connection it made would wait in the backlog by now.
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()


def test_a_missing_flights_file_is_refused_before_any_broker_contact(tmp_path, listener):
    airports = tmp_path / "airports.csv"
    airports.write_text(AIRPORTS_TEXT, encoding="utf-8")
    flights = tmp_path / "absent.csv"
    done = run_client(tmp_path, listener, flights, airports)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"client: flights file {flights}: no such file\n"
    assert_never_connected(listener)
    assert not (tmp_path / "results").exists()


def test_a_header_without_the_queries_columns_is_refused_before_any_broker_contact(tmp_path,
                                                                                   listener):
    flights = tmp_path / "flights.csv"
    flights.write_text("foo,bar\n1,2\n", encoding="utf-8")
    airports = tmp_path / "airports.csv"
    airports.write_text(AIRPORTS_TEXT, encoding="utf-8")
    done = run_client(tmp_path, listener, flights, airports)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"client: flights file {flights}: missing columns legId, startingAirport, "
        "destinationAirport, travelDuration, totalFare, totalTravelDistance, "
        "segmentsArrivalAirportCode (its header split on ',': foo, bar)\n")
    assert_never_connected(listener)


def test_the_listener_sees_a_client_whose_files_pass(tmp_path, listener):
    """The probe above works: with good files the client does connect."""
    flights, airports = tmp_path / "flights.csv", tmp_path / "airports.csv"
    flights.write_text(FLIGHTS_TEXT, encoding="utf-8")
    airports.write_text(AIRPORTS_TEXT, encoding="utf-8")
    client = subprocess.Popen(client_command(tmp_path, listener, flights, airports), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        listener.settimeout(CLIENT_TIMEOUT_S)
        connection, _ = listener.accept()
        connection.close()
    finally:
        client.kill()
        out, _ = client.communicate(timeout=CLIENT_TIMEOUT_S)
    assert out.startswith("client ")  # its session id, printed after the check passed

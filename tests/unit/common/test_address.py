"""HOST:PORT and ID@HOST:PORT: one parser for every service; the old ID=HOST:PORT warns."""

import io

import pytest

from common.address import (
    Address,
    AddressError,
    Peer,
    format_peers,
    parse_host_port,
    parse_host_ports,
    parse_peers,
)


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9092", Address("127.0.0.1", 9092)),
    (" broker-1:0 ", Address("broker-1", 0)),
    ("[::1]:9400", Address("::1", 9400)),
])
def test_host_port(text, expected):
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["", "host", ":9092", "host:", "host:x", "host:65536",
                                  "host:-1"])
def test_a_bad_host_port_is_a_named_error(text):
    with pytest.raises(AddressError, match="expected HOST:PORT"):
        parse_host_port(text)


def test_port_zero_can_be_refused():
    with pytest.raises(AddressError, match="1..65535"):
        parse_host_port("h:0", port_min=1)


def test_host_port_lists_skip_empty_items():
    assert parse_host_ports("a:1,,b:2,") == (Address("a", 1), Address("b", 2))
    assert parse_host_ports("") == ()


def test_address_prints_back():
    assert str(Address("h", 1)) == "h:1" and str(Address("::1", 2)) == "[::1]:2"


def test_peers_round_trip_without_warning():
    warnings = io.StringIO()
    peers = parse_peers("2@h:1,3@[::1]:2", warnings=warnings)
    assert peers == (Peer(2, "h", 1), Peer(3, "::1", 2))
    assert parse_peers(format_peers(peers), warnings=warnings) == peers
    assert warnings.getvalue() == ""


def test_the_old_checker_syntax_is_read_with_one_warning_line():
    warnings = io.StringIO()
    assert parse_peers("2=h:1,3=h:2", warnings=warnings) == (Peer(2, "h", 1), Peer(3, "h", 2))
    lines = warnings.getvalue().splitlines()
    assert len(lines) == 1 and "deprecated" in lines[0] and "2@h:1,3@h:2" in lines[0]


@pytest.mark.parametrize("text", ["h:1", "x@h:1", "2@h", "@h:1"])
def test_a_bad_peer_is_a_named_error(text):
    with pytest.raises(AddressError):
        parse_peers(text)

"""HOST:PORT, ID@HOST:PORT and Kafka's named NAME://HOST:PORT: one parser for every service; the
old ID=HOST:PORT warns."""

import io

import pytest

from common.address import (
    Address,
    AddressError,
    NamedAddress,
    NamedPeer,
    Peer,
    format_named,
    format_peers,
    parse_host_port,
    parse_host_ports,
    parse_named_addresses,
    parse_named_peers,
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


def test_named_addresses_are_read_upper_case_and_print_back():
    named = parse_named_addresses("internal://broker-1:19092, EXTERNAL://[::1]:0,")
    assert named == (NamedAddress("INTERNAL", "broker-1", 19092),
                     NamedAddress("EXTERNAL", "::1", 0))
    assert parse_named_addresses(format_named(named)) == named
    assert str(named[1]) == "EXTERNAL://[::1]:0"
    assert named[0].address == Address("broker-1", 19092)


@pytest.mark.parametrize("text, reason", [
    ("broker-1:19092", "no listener NAME://"),
    ("://h:1", "a name is a letter"),
    ("1ST://h:1", "a name is a letter"),
    ("IN TERNAL://h:1", "a name is a letter"),
    ("A" * 65 + "://h:1", "at most 64 characters"),
    ("A://h", "no ':' before the port"),
    ("A://:1", "the host is empty"),
    ("A://h:99999", "0..65535"),
])
def test_a_bad_named_address_is_a_named_error(text, reason):
    with pytest.raises(AddressError, match="expected NAME://HOST:PORT") as raised:
        parse_named_addresses(text)
    assert reason in str(raised.value) and repr(text) in str(raised.value)


def test_named_peers_default_their_listener_and_print_back():
    peers = parse_named_peers("2@internal://b2:1,3@b3:2", default_name="PLAINTEXT")
    assert peers == (NamedPeer(2, "INTERNAL", "b2", 1), NamedPeer(3, "PLAINTEXT", "b3", 2))
    assert parse_named_peers(format_named(peers), default_name="X") == peers


@pytest.mark.parametrize("text, expected", [("INTERNAL://b2:1", "expected ID@NAME://HOST:PORT"),
                                            ("x@A://b2:1", "expected ID@NAME://HOST:PORT"),
                                            ("2@A://b2:0", "1..65535"),
                                            ("2@-://b2:1", "a name is a letter")])
def test_a_bad_named_peer_is_a_named_error(text, expected):
    with pytest.raises(AddressError, match=expected):
        parse_named_peers(text, default_name="PLAINTEXT", port_min=1)

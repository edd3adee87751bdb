"""Session control records: round trips and refusal of malformed documents."""

import json
from dataclasses import asdict

import pytest

from common.flights import session_records as sr

RECORDS = [
    sr.SessionStarted(client_id="c1", partitions=4),
    sr.SessionStarted(client_id="c1", partitions=3, airports_end_offsets=[2, 0, 7]),
    sr.SessionEnded(client_id="c1", end_offsets={"flights.c1": [3, 0, 2, 9]},
                    rows_sent={"flights": 10}, rows_rejected={"short_row": 1}),
    sr.ResultRows(query="q3", first_row=600, rows=[["a", "ATL-BOS", "DFW||ORD", "PT7H"]]),
    sr.QueryDone(query="q4", rows=12, invalid={"bad_fare": 2}),
    sr.ResultsAcked(client_id="0b7e6a52-9d1c-4c7e-a3b5-1f0e2d3c4b5a"),
    sr.ResultsAcked(client_id="c1", rows_per_query={"q1": 3, "q2": 0, "q3": 1, "q4": 7}),
]


@pytest.mark.parametrize("record", RECORDS)
def test_round_trip(record):
    assert sr.decode(sr.encode(record)) == record


@pytest.mark.parametrize("record", RECORDS)
def test_the_bytes_are_those_of_the_record_as_a_dict(record):
    """encode skips asdict's deep copy; the document, key order included, stays the same."""
    expected = json.dumps({"type": type(record).__name__, **asdict(record)},
                          separators=(",", ":")).encode()
    assert sr.encode(record) == expected


@pytest.mark.parametrize("payload", [
    b"", b"\xff\xfe", b"[1,2]", b'{"type":"Nope"}', b'{"type":"QueryDone","query":"q1"}',
    b'{"type":"QueryDone","query":"q9","rows":1}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"extra":1}',
    b'{"type":"ResultsAcked"}', b'{"type":"ResultsAcked","client_id":""}',
    b'{"type":"ResultsAcked","client_id":7}', b'{"type":"ResultsAcked","client_id":null}',
    b'{"type":"ResultsAcked","client_id":"c","end_offsets":{}}',
    b'{"type":"ResultsAcked","client_id":"c","rows_per_query":[]}',
    b'{"type":"ResultsAcked","client_id":"c","rows_per_query":{"q9":1}}',
    b'{"type":"ResultsAcked","client_id":"c","rows_per_query":{"q1":-1}}',
    b'{"type":"ResultsAcked","client_id":"c","rows_per_query":{"q1":"7"}}',
    b'{"type":"ResultsAcked","client_id":"c","rows_per_query":{"q1":true}}',
    b'{"type":"SessionArchived","client_id":"c"}',  # a type from a newer writer
    b'{"type":"SessionStarted","client_id":"c","partitions":2,"airports_end_offsets":[1]}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"airports_end_offsets":[-1]}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"airports_end_offsets":["1"]}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"airports_end_offsets":[true]}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"airports_end_offsets":[1.5]}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"airports_end_offsets":{}}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"airports_end_offsets":7}',
    b'{"type":"SessionStarted","client_id":"c","partitions":0,"airports_end_offsets":[]}',
    b'{"type":"SessionStarted","client_id":"c","partitions":"2"}',
])
def test_malformed_records_raise_a_named_error(payload):
    with pytest.raises(sr.MalformedSessionRecordError):
        sr.decode(payload)


def test_topic_names():
    assert (sr.flights_topic("c"), sr.airports_topic("c"), sr.results_topic("c")) == (
        "flights.c", "airports.c", "results.c")


def test_an_ack_is_encoded_as_a_small_fixed_document():
    assert sr.encode(sr.ResultsAcked("c1", {"q1": 2})) == \
        b'{"type":"ResultsAcked","client_id":"c1","rows_per_query":{"q1":2}}'


def test_an_ack_written_before_its_row_counts_existed_still_decodes():
    assert sr.decode(b'{"type":"ResultsAcked","client_id":"c1"}') == sr.ResultsAcked("c1", {})


def test_records_written_before_results_acked_existed_still_decode():
    """A `sessions` log from before: SessionEnded without the later optional fields."""
    old = b'{"type":"SessionEnded","client_id":"c1","end_offsets":{"flights.c1":[4]}}'
    assert sr.decode(old) == sr.SessionEnded("c1", {"flights.c1": [4]})


def test_a_start_written_before_its_airports_end_offsets_existed_still_decodes():
    old = b'{"type":"SessionStarted","client_id":"c1","partitions":4}'
    assert sr.decode(old) == sr.SessionStarted("c1", 4, None)


def test_session_topics_input_first():
    assert sr.session_topics("c") == ("airports.c", "flights.c", "results.c")

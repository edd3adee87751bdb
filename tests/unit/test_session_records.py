"""Session control records: round trips and refusal of malformed documents."""

import pytest

from common import session_records as sr


@pytest.mark.parametrize("record", [
    sr.SessionStarted(client_id="c1", partitions=4),
    sr.SessionEnded(client_id="c1", end_offsets={"flights.c1": [3, 0, 2, 9]},
                    rows_sent={"flights": 10}, rows_rejected={"short_row": 1}),
    sr.ResultRows(query="q3", first_row=600, rows=[["a", "ATL-BOS", "DFW||ORD", "PT7H"]]),
    sr.QueryDone(query="q4", rows=12, invalid={"bad_fare": 2}),
])
def test_round_trip(record):
    assert sr.decode(sr.encode(record)) == record


@pytest.mark.parametrize("payload", [
    b"", b"\xff\xfe", b"[1,2]", b'{"type":"Nope"}', b'{"type":"QueryDone","query":"q1"}',
    b'{"type":"QueryDone","query":"q9","rows":1}',
    b'{"type":"SessionStarted","client_id":"c","partitions":1,"extra":1}',
])
def test_malformed_records_raise_a_named_error(payload):
    with pytest.raises(sr.MalformedSessionRecordError):
        sr.decode(payload)


def test_topic_names():
    assert (sr.flights_topic("c"), sr.airports_topic("c"), sr.results_topic("c")) == (
        "flights.c", "airports.c", "results.c")

"""Bounded body codec: round trips and every way a body can lie about its lengths."""

import pytest

from common.kaska.errors import InvalidRequestError, InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter


def test_round_trip_of_every_field_type():
    body = (BodyWriter().u8(7).u16(65535).i16(-2).u32(2**32 - 1).i32(-5).i64(-(2**63))
            .flag(True).string("héllo").short_bytes(b"\x00\xff").raw(b"tail").getvalue())
    reader = BodyReader(body)
    got = (reader.u8(), reader.u16(), reader.i16(), reader.u32(), reader.i32(), reader.i64(),
           reader.flag(), reader.string(), reader.short_bytes(), bytes(reader.rest()))
    assert got == (7, 65535, -2, 2**32 - 1, -5, -(2**63), True, "héllo", b"\x00\xff", b"tail")
    reader.finish()


@pytest.mark.parametrize("read", ["u8", "u16", "u32", "i64", "string", "short_bytes"])
def test_empty_body_is_refused_for_every_field(read):
    with pytest.raises(InvalidRequestError, match="ends"):
        getattr(BodyReader(b""), read)()


def test_string_longer_than_the_body_is_refused_without_allocating():
    reader = BodyReader(b"\xff\xff" + b"ab")
    with pytest.raises(InvalidRequestError, match="65535 bytes announced"):
        reader.string()


def test_invalid_utf8_is_refused():
    with pytest.raises(InvalidRequestError, match="UTF-8"):
        BodyReader(b"\x00\x02\xc3\x28").string()


def test_array_count_beyond_what_the_body_can_hold_is_refused():
    reader = BodyReader(b"\xff\xff\xff\xff" + bytes(10))
    with pytest.raises(InvalidRequestError, match="cannot hold"):
        reader.count(element_bytes_min=2)


def test_trailing_bytes_are_refused():
    reader = BodyReader(b"\x01\x02")
    reader.u8()
    with pytest.raises(InvalidRequestError, match="1 unexpected"):
        reader.finish()


def test_flag_other_than_zero_or_one_is_refused():
    with pytest.raises(InvalidRequestError, match="not 0 or 1"):
        BodyReader(b"\x02").flag()


def test_reader_raises_the_error_class_it_was_given():
    with pytest.raises(InvalidResponseError):
        BodyReader(b"", InvalidResponseError).u32()


def test_writer_refuses_a_string_over_the_u16_length():
    with pytest.raises(ValueError, match="u16"):
        BodyWriter().string("x" * 65536)

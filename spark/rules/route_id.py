"""A route ("ATL-BOS") as one integer: what the `kaska` source's Python workers hand Spark for
every valid row instead of two airport strings.

Why: Q4 groups ~all valid rows by route and Q3 ranks within a route; a long per row is the
narrowest key the JVM can cache and hash, and only the few hundred result rows ever need the
text back. Valid rows only: both airports of a valid row are three letters A-Z (docs/queries.md),
so `route_id = code(origin) * 26**3 + code(destination)` with `code("XYZ") = (X-65)*26**2 +
(Y-65)*26 + (Z-65)` is exact and the same in every worker, with no dictionary to share.

`airport_codes` (numpy, in the workers) encodes; `route_text` (a Spark column) and `route_of`
(Python, for tests) decode. Pure functions; thread-safe.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

LETTERS = 26
CODE_LETTERS = 3
AIRPORT_CODES = LETTERS ** CODE_LETTERS  # 17,576: every three-letter code A-Z
_FIRST_LETTER = ord("A")


def is_airport_code(code: str) -> bool:
    """docs/queries.md's rule: three letters A-Z (`spark.rules.contract.AIRPORT_CODE_REGEX`)."""
    return len(code) == CODE_LETTERS and code.isascii() and code.isalpha() and code.isupper()


def airport_code_number(code: str) -> int:
    """0 .. AIRPORT_CODES - 1 for a three-letter code A-Z."""
    assert is_airport_code(code), code
    number = 0
    for letter in code:
        number = number * LETTERS + ord(letter) - _FIRST_LETTER
    return number


def airport_codes(codes: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether the text is an airport code (`is_airport_code`; null is not), and its
    `airport_code_number` (0 where it is not). Worked out once per distinct text: a batch
    holds a few hundred airports, so one pass over the rows serves both the validity rule
    and the route id."""
    distinct = pc.dictionary_encode(codes)
    texts = distinct.dictionary.to_pylist()
    # One slot past the distinct texts, for the nulls.
    ok = np.array([is_airport_code(text) for text in texts] + [False])
    numbers = np.array([airport_code_number(text) if is_airport_code(text) else 0
                        for text in texts] + [0], dtype=np.int64)
    index = pc.fill_null(distinct.indices, len(texts)).to_numpy(zero_copy_only=False)
    return ok[index], numbers[index]


def route_of(route_id: int) -> str:
    """"ATL-BOS" of its id."""
    origin, destination = divmod(route_id, AIRPORT_CODES)
    return f"{_code_of(origin)}-{_code_of(destination)}"


def _code_of(number: int) -> str:
    letters = []
    for _ in range(CODE_LETTERS):
        number, letter = divmod(number, LETTERS)
        letters.append(chr(_FIRST_LETTER + letter))
    return "".join(reversed(letters))


def route_text(route_id: Column) -> Column:
    """The Spark column of `route_of`: "XYZ-ABC" of an id column (null stays null)."""
    places = [LETTERS ** power for power in range(2 * CODE_LETTERS - 1, -1, -1)]
    letters = [F.char(F.lit(_FIRST_LETTER) + F.pmod(F.floor(route_id / place), F.lit(LETTERS)))
               for place in places]
    return F.concat(*letters[:CODE_LETTERS], F.lit("-"), *letters[CODE_LETTERS:])

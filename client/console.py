"""Result rows on the console as they arrive: the first `rows_shown_max` of each query, then
only counts, so a query with a million rows does not flood the terminal.

Thread-safety: used by the results thread only.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable

from common.flights.result_csv import QUERY_HEADERS, csv_line
from common.flights.session_records import QueryDone

ROWS_SHOWN_MAX_DEFAULT = 5


class ResultPrinter:
    def __init__(self, rows_shown_max: int = ROWS_SHOWN_MAX_DEFAULT,
                 emit: Callable[[str], None] | None = None) -> None:
        self.rows_shown_max = rows_shown_max
        self.emit = emit or (lambda line: print(line, file=sys.stdout, flush=True))
        self.received: Counter[str] = Counter()

    def on_rows(self, query: str, rows: list[list[str]]) -> None:
        for row in rows:
            if self.received[query] == 0:
                self.emit(f"{query} | {','.join(QUERY_HEADERS[query])}")
            self.received[query] += 1
            if self.received[query] <= self.rows_shown_max:
                self.emit(f"{query} | {csv_line(row).rstrip()}")
            elif self.received[query] == self.rows_shown_max + 1:
                self.emit(f"{query} | ... (more rows arriving; all of them go to {query}.csv)")

    def on_done(self, done: QueryDone) -> None:
        invalid = sum(done.invalid.values())
        self.emit(f"{done.query} done: {done.rows:,} rows"
                  + (f" ({invalid:,} input rows invalid for the queries)" if invalid else ""))

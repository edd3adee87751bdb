"""The query oracle: docs/queries.md computed independently of the query service, and the rules
for judging the service's results against it. Imports common/ only (and pandas, pyarrow,
DuckDB), never spark/: an oracle that shared the service's code would share its mistakes.

    reference       plain-Python reading of the contract, row by row (the yardstick)
    duckdb_queries  the same contract in DuckDB SQL, for the full dataset's sizes and as the
                    pipeline benchmark's baseline (the only module that imports duckdb, a
                    dev/bench extra: `import oracle` works without it)
    result_compare  docs/queries.md's equality of results: multisets, numbers within 1e-9
    session_check   one client session's results and summary judged against a reference

Used by the tests, the benchmarks and chaos-verify.
"""

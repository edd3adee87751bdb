"""The query rules of docs/queries.md as the query service runs them:

    contract          the names and numbers: input columns, validity rules, thresholds,
                      regexes, output and prepared columns
    flight_fields     a flight row's query fields, derived columnar in the `kaska` source's
                      Python workers (pyarrow)
    airport_distances great-circle miles between airports, in those workers
    route_id          a route as one integer, and back to its text
    query_frames      the Spark SQL half: airports prepared, rows counted, Q3's ranking,
                      Q4's threshold (and the decisions docs/queries.md leaves open)
    derived_queries   Q1-Q4 of a session job over the derived rows (`--fold batch`)
    result_columns    result rows formatted as docs/queries.md prints them (pyarrow)
    result_order      result rows in a deterministic order, collected as Arrow
"""

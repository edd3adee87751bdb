"""The flights contract between the client, the query service and the status page:

    session_records  the records of a session's topics (sessions, acks, results): their
                     names, encoding and size bounds
    arrow_rows       a batch of CSV rows as one Arrow IPC payload (the flights and airports
                     topics' record values)
    result_csv       q1.csv ... q4.csv: the result files' headers and number formatting
"""

"""The query service: one long-running Spark application answering every session
(`python -m spark.service`, __main__.py: the command line, start-up and shutdown order, and
the rules the service follows).

    service_settings  the settings the command line builds
    driver            the SparkSession, the warm-up, stopping Spark
    query_service     the main loop over `sessions`: jobs, commits, topic deletion
    session_workers   the session jobs in worker threads, and their retries
    session_job       one ended session's Q1-Q4 (`--fold batch`)
    session_progress  which sessions are finished, so which position may be committed
    progress_store    where that position is kept (broker group or local checkpoint)
    session_cleanup   when an acknowledged session's topics are deleted
    acks_ahead        acknowledgements read at start, so acknowledged sessions run no job
    result_writer     result rows and QueryDone records to `results.<cid>`, idempotently
    warm_up           sample queries at start and while idle, so sessions find the JVM warm
    metrics           the Prometheus collectors
The streaming fold (`--fold stream`, the default) is spark/folding/.
"""

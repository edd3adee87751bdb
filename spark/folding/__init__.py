"""The streaming fold: one Structured Streaming query folds every session's flight rows as they
are acknowledged, and a small finish completes Q3 and Q4 once a session has ended
(docs/streaming.md). The modules, in the order a row meets them: stream_query (the query and
its supervision), stream_fields (the source's gate and per-range transform), batch_fold (a
range's partial, a micro-batch's fold), fold_store and session_state (each session's state,
in memory and on disk), finish (Q3, Q4), prefix_release (DeleteRecords behind the fold);
service_fold ties them to the query service's main loop; session_files, checkpoint_log,
airports and warm_up serve them."""

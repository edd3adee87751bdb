"""The `kaska` PySpark data source (`pyspark.sql.datasource`): batch reads over explicit offset
ranges and a streaming reader over per-partition broker offsets, Arrow record batches out.

    kaska_source   the DataSource and its batch reader (the format's contract: its docstring)
    kaska_options  the options, parsed once on the driver
    kaska_plan     offsets and ranges planned per read or micro-batch
    kaska_read     one range read in a worker, decoded to Arrow
    kaska_stream   the streaming reader
    kaska_gate     which topics a stream admits
"""

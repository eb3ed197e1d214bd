"""Streams as DataFrames (docs/spark-jobs.md): reading offset ranges of any log (`streams`, over
`local_source` or `kafka_source`), Avro payloads (`avro`), appending from the executors
(`log_writer`), dead letters (`dead_letters`), and a stream's records over time (`intervals`,
`history`, and `coverage`, the archive's proof of no hole).

Nothing is re-exported here, so importing one module does not load the others.
"""

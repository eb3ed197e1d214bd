"""Shared Spark helpers of the jobs in `jobs/` (session, stream sources, Avro payloads, the
exactly-once Delta sink, data quality). `jobs.spark.submit` imports no pyspark, so Airflow DAGs
can build spark-submit arguments from it; `phases` (timing) needs none either; every other
module needs pyspark (`gx_engine` through Great Expectations' Spark engine)."""

"""The Spark jobs: one module per job, each run by spark-submit as a file; their shared helpers
are in `jobs.spark`."""

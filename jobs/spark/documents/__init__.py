"""The importer's documents (docs/spark-jobs.md): random or file-read Document DataFrames
(`frames`, `formats`), the allowed import roots (`import_roots`) and the `repository` table with
its landing (`repository`).

Nothing is re-exported here: `formats` and `import_roots` import no pyspark and are checked
before Spark starts (by a DAG's validate task too).
"""

"""The Spark building blocks of bulk actions (docs/bulk.md "Spark building blocks"), composed by
`jobs/bulk_action.py`.

One module per block:

- `scroll`: `scroll` writes the ids matching a query, in id order, numbered into buckets and
  batches, as Parquet; `load_scroll` reuses a complete one; `id_ranges` gives a bucket's batches
  as id ranges, `bucket_docs` the current rows of one (read within its bounds).
- `apply`: `apply_update` / `apply_delete`, one MERGE of a batch into `repository`, exactly once
  by its Delta txn id.
- `csv_export`: `write_csv_part` (one bucket's rows, sorted by id) and `finish_csv` (one file
  with a header, merged by id, zipped).
- `status_table`: `record_status`, a command's full status MERGEd into the Delta table
  `bulk_status`.

Nothing is re-exported here, so importing `csv_export` does not load pyspark.
"""

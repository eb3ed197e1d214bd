"""Checked landings (docs/spark-jobs.md "Data quality"): `checked` (the one base of checked
landings), expectation suites (`expectations`), the metrics that ride along the row-check pass
(`gx_metrics`, `gx_engine`), Great Expectations validation (`validation`) and the `quarantine`
table.

Nothing is re-exported here, so importing one module does not load the others.
"""

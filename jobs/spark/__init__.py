"""The shared Spark framework of the jobs in `jobs/` (docs/spark-jobs.md): the job skeleton
(`job`), the exactly-once offset batch (`batches`, `batch_positions`), timing (`phases`), the
session (`session`) and spark-submit's arguments (`submit`) here; the building blocks in one
package per role: `logs` (streams as DataFrames), `delta` (the sink, Delta SQL, the catalog),
`quality` (checked landings, expectations, Great Expectations), `documents` (the importer's
inputs and the repository table) and `bulk` (bulk actions).

`submit`, `phases`, `documents.formats` and `documents.import_roots` import no pyspark, so Airflow
DAGs can use them at parse time; every other module needs pyspark."""

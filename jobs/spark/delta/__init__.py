"""Delta tables (docs/spark-jobs.md): the exactly-once batch sink (`sink`), Delta through its SQL
on classic and Connect sessions (`sql`), the table catalog (`catalog`), and whether a batch's
keys are unique (`keys`).

Nothing is re-exported here, so importing one module does not load the others.
"""

"""The shared lake layer: what ingest, health and maintenance all need of an Iceberg table —
creation and listing (tables), the exactly-once offsets ledger in snapshot summaries and table
properties (offsets), in-flight markers that protect uncommitted files (inflight), and reading
Spark checkpoints (checkpoint)."""

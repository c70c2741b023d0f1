"""Kafka → Iceberg ingestion with Spark Structured Streaming (``foreachBatch``)."""

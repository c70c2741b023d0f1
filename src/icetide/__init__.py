"""icetide: exactly-once Kafka → Apache Iceberg ingestion and table maintenance on Apache Spark."""

__version__ = "0.1.0"

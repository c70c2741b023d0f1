"""The demo: a local broker, sample events with drift and bad records, ingestion, a report."""

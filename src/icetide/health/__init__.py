"""Table health: metadata-only figures per table and partition, a score, history, alerts, metrics."""

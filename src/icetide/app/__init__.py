"""The application layer: runs a pipeline (ingest + in-run maintenance) and renders output;
used by the CLI and the demo, above every domain package."""

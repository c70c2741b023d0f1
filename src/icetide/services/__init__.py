"""Local real services for development, the demo, tests and CI (no Docker needed)."""

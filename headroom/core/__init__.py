"""The spine every stage shares: artifacts (atomic Parquet writes with BLAKE3 and provenance), the
stage harness scripts run through, study config, settings merges, the catalog, replay and the CLI."""

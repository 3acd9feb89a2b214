"""The spine every stage shares: artifacts (atomic Parquet writes with BLAKE3 and provenance),
contracts (one schema per artifact kind), the stage harness scripts run through, study config with
its schema (package data) and the default study (defaults), settings merges, progress lines, the
catalog, replay and the CLI."""

"""The pipeline stages: sample, solve, synthesize, check, annotate (plain functions: no Prefect, no DuckDB)."""


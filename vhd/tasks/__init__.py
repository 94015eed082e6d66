"""Pipeline stages as plain functions (no prefect, no duckdb)."""

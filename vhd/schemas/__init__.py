"""Records, errors, hashing and DDL migrations. Imports nothing else of ours."""

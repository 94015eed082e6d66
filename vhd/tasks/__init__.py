"""Pipeline stages as plain functions (no prefect, no duckdb)."""

import threading

# Prefect runs tasks in threads, and CPython 3.11's AST conversion (ast.parse, inspect.getsource,
# ast.literal_eval inside np.load) is not thread-safe: "AST constructor recursion depth
# mismatch". Every use of it in a task holds this one (re-entrant) lock.
AST_LOCK = threading.RLock()

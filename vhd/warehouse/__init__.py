"""The only package that imports duckdb: connection, migrations, store and lineage queries."""

from vhd.warehouse.store import Warehouse, default_path

__all__ = ["Warehouse", "default_path"]

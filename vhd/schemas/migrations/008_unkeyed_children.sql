-- 008: checks and lineage_edges without a primary key (issue 31). DuckDB holds a primary key's index
-- (ART) in memory from the first insert into its table on, and loads all of it for every insert:
-- these two tables have ~13 and ~17 rows an environment, and their keys (64 hex digits; three
-- columns for an edge) made indexes of 70 MB at scale 3 (28 at scale 1), the part of a refresh's
-- memory that grew with the corpus. `Warehouse.insert` writes a row of them only where no stored
-- row has its key, as the key's INSERT OR IGNORE did, and refuses a stored row met with another
-- content, as before; a row stored twice (which only an edit of the file makes) is refused by every
-- publish and reported by `vhd verify` (`Warehouse.stored_twice`). Columns, types and order as they
-- were.
CREATE TABLE checks_008 (
    check_id VARCHAR NOT NULL, env_id VARCHAR NOT NULL, gate VARCHAR NOT NULL, passed BOOLEAN NOT NULL,
    message VARCHAR NOT NULL, checker_version VARCHAR NOT NULL, seconds DOUBLE NOT NULL, run_id VARCHAR NOT NULL,
    field_digests VARCHAR NOT NULL DEFAULT ''
);
INSERT INTO checks_008 SELECT check_id, env_id, gate, passed, message, checker_version, seconds, run_id, field_digests
FROM checks ORDER BY check_id;
DROP TABLE checks;
ALTER TABLE checks_008 RENAME TO checks;
CREATE TABLE lineage_edges_008 (child_id VARCHAR NOT NULL, parent_id VARCHAR NOT NULL, relation VARCHAR NOT NULL);
INSERT INTO lineage_edges_008 SELECT child_id, parent_id, relation FROM lineage_edges ORDER BY ALL;
DROP TABLE lineage_edges;
ALTER TABLE lineage_edges_008 RENAME TO lineage_edges;

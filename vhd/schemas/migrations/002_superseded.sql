-- Rows made by an older version of their code (a family bumped its version, the checker or the
-- annotator changed): kept, with their lineage, and marked here so that readers and corpus
-- versions skip them. `code_version` made the row; `current_version` is what the code is now.
CREATE TABLE superseded (
    id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, code_version VARCHAR NOT NULL,
    current_version VARCHAR NOT NULL, run_id VARCHAR NOT NULL, marked_at VARCHAR NOT NULL
);

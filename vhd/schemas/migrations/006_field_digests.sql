-- 006: per-field digests of every row a trainer or grader depends on (issue 18). `field_digests`
-- holds canonical JSON {field: first 16 hex digits of the sha256 of the stored value} (`field_digest`),
-- computed by `Warehouse.insert` over the row as written, run ids and timings included; the audit
-- recomputes them and names every field that changed. '' for rows written before this migration
-- (the audit reports them as unsealed; `vhd verify --seal` seals them once they verify).
ALTER TABLE passages ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';
ALTER TABLE models ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';
ALTER TABLE solutions ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';
ALTER TABLE setter_outputs ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';
ALTER TABLE checks ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';
ALTER TABLE environments ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';
ALTER TABLE corpus_versions ADD COLUMN field_digests VARCHAR NOT NULL DEFAULT '';

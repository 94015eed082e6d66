-- 007: the difficulty of each environment (issue 30), measured at annotation from the solved model
-- (vhd/tasks/difficulty.py): canonical JSON {version, size, horizon, knob_position, state_space, span,
-- agents, hidden_price, presentation, score}. '{}' for a rejected candidate and for rows annotated
-- before this migration; their field digests, written before the column existed, name no digest for
-- it, which the audit accepts only while the value is that default (hashing.LATE_COLUMNS).
ALTER TABLE environments ADD COLUMN difficulty VARCHAR NOT NULL DEFAULT '{}';

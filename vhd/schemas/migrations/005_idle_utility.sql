-- 005: the realized utility of doing nothing (the episode finished at once) on each environment's
-- episode seed; the reward's zero is max(u_default, u_idle). NULL for environments annotated before.
ALTER TABLE environments ADD COLUMN u_idle DOUBLE;

-- 001: the record tables of DESIGN §8. JSON columns hold canonical JSON text.
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY, flow VARCHAR NOT NULL, started_at VARCHAR NOT NULL, finished_at VARCHAR,
    status VARCHAR NOT NULL, parameters VARCHAR NOT NULL, code_version VARCHAR NOT NULL, summary VARCHAR NOT NULL
);
CREATE TABLE passages (
    passage_id VARCHAR PRIMARY KEY, domain VARCHAR NOT NULL, source VARCHAR NOT NULL, text VARCHAR NOT NULL,
    vocabulary VARCHAR NOT NULL
);
CREATE TABLE models (
    model_id VARCHAR PRIMARY KEY, family VARCHAR NOT NULL, family_version VARCHAR NOT NULL, knobs VARCHAR NOT NULL,
    seed BIGINT NOT NULL, theta VARCHAR NOT NULL, batch VARCHAR NOT NULL, run_id VARCHAR NOT NULL
);
CREATE TABLE solutions (
    solution_id VARCHAR PRIMARY KEY, model_id VARCHAR NOT NULL, family VARCHAR NOT NULL, family_version VARCHAR NOT NULL,
    u_star DOUBLE NOT NULL, u_default DOUBLE NOT NULL, u_idle DOUBLE NOT NULL, certificate VARCHAR NOT NULL,
    policy_digest VARCHAR NOT NULL, policy BLOB NOT NULL, seconds DOUBLE NOT NULL, run_id VARCHAR NOT NULL
);
CREATE TABLE setter_outputs (
    setter_output_id VARCHAR PRIMARY KEY, family VARCHAR NOT NULL, family_version VARCHAR NOT NULL,
    setter VARCHAR NOT NULL, setter_version VARCHAR NOT NULL, passage_id VARCHAR NOT NULL, module VARCHAR NOT NULL,
    interface VARCHAR NOT NULL, run_id VARCHAR NOT NULL
);
CREATE TABLE checks (
    check_id VARCHAR PRIMARY KEY, env_id VARCHAR NOT NULL, gate VARCHAR NOT NULL, passed BOOLEAN NOT NULL,
    message VARCHAR NOT NULL, checker_version VARCHAR NOT NULL, seconds DOUBLE NOT NULL, run_id VARCHAR NOT NULL
);
CREATE TABLE environments (
    env_id VARCHAR PRIMARY KEY, family VARCHAR NOT NULL, presentation VARCHAR NOT NULL, split VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL, solution_id VARCHAR NOT NULL, setter_output_id VARCHAR NOT NULL,
    episode_seed BIGINT NOT NULL, turn_budget INTEGER NOT NULL, knobs VARCHAR NOT NULL, u_star DOUBLE NOT NULL,
    u_default DOUBLE NOT NULL, reference_trajectory VARCHAR NOT NULL, default_trajectory VARCHAR NOT NULL,
    instruction VARCHAR NOT NULL, tools VARCHAR NOT NULL, admitted BOOLEAN NOT NULL, reason VARCHAR NOT NULL,
    gate_seconds VARCHAR NOT NULL, annotator_version VARCHAR NOT NULL, run_id VARCHAR NOT NULL
);
CREATE TABLE lineage_edges (
    child_id VARCHAR NOT NULL, parent_id VARCHAR NOT NULL, relation VARCHAR NOT NULL,
    PRIMARY KEY (child_id, parent_id, relation)
);
CREATE TABLE corpus_versions (
    version VARCHAR PRIMARY KEY, created_at VARCHAR NOT NULL, run_id VARCHAR NOT NULL, admitted INTEGER NOT NULL,
    manifest VARCHAR NOT NULL
);

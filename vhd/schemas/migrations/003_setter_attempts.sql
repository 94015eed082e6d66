-- One row per LLM setter output (issue 5): how the module was obtained. `setter_output_id` is
-- '' when no attempt produced a parseable module. `rewritten`: the module's tool names or
-- argument schemas differ from the template setter's rendering for the same passage.
CREATE TABLE setter_attempts (
    attempt_id VARCHAR PRIMARY KEY, setter_output_id VARCHAR NOT NULL, family VARCHAR NOT NULL,
    passage_id VARCHAR NOT NULL, setter VARCHAR NOT NULL, llm_model VARCHAR NOT NULL,
    attempts INTEGER NOT NULL, first_try BOOLEAN NOT NULL, passed BOOLEAN NOT NULL, rewritten BOOLEAN NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cost_usd DOUBLE NOT NULL,
    reasons VARCHAR NOT NULL, run_id VARCHAR NOT NULL
);

-- 004: agent episodes (vhd eval). One row per (environment, agent, episode); the JSON columns
-- hold canonical JSON text: messages (LLM conversation), tool_calls, observations (the sandbox
-- replay's report), tokens ({"input", "output"}).
CREATE TABLE episodes (
    episode_id VARCHAR PRIMARY KEY, env_id VARCHAR NOT NULL, corpus_version VARCHAR NOT NULL, agent VARCHAR NOT NULL,
    presentation VARCHAR NOT NULL, family VARCHAR NOT NULL, episode_seed BIGINT NOT NULL, episode_index INTEGER NOT NULL,
    messages VARCHAR NOT NULL, tool_calls VARCHAR NOT NULL, observations VARCHAR NOT NULL, tokens VARCHAR NOT NULL,
    utility DOUBLE, reward DOUBLE NOT NULL, created_at VARCHAR NOT NULL
);

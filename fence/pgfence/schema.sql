-- The fence table of package github.com/cronlock/cronlock/fence/pgfence (pgfence.Schema
-- returns this text). One row per resource: the highest fencing token a write for it
-- carried. pgfence.Check raises token inside the writer's transaction and refuses a lower one.
-- Run it once, as a migration; it does nothing when the table exists.
CREATE TABLE IF NOT EXISTS cronlock_fence (
    -- The name of the data the writes guard, the same for every run of a job.
    resource   text        PRIMARY KEY CHECK (resource <> ''),
    -- The highest token seen for resource (cronlock tokens are positive and fit in a bigint).
    token      bigint      NOT NULL CHECK (token > 0),
    -- When token was last written (an equal token writes it again).
    updated_at timestamptz NOT NULL DEFAULT now()
);

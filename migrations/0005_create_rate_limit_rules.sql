-- Rate-limit rule documents for installations without Redis (the embedded default): one row per
-- limiter holding the LimiterRules JSON (file, published and default tiers), plus orphan marks.
-- With ARKVORY_REDIS_URL set the documents live in Redis instead and these tables stay empty.
CREATE TABLE arkvory_rate_limit_rules (
  limiter text PRIMARY KEY CHECK (limiter ~ '^[a-z0-9_]{1,64}$'),
  document jsonb NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE arkvory_rate_limit_orphans (
  limiter text PRIMARY KEY,
  first_seen_ms bigint NOT NULL
);

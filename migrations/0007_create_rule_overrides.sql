-- Per-principal and per-repository rate-limit rule overrides of the reference rules service
-- (`arkvory rules-service`, Phase 3). Scoped by the calling service's name and the limiter, so two
-- services that share a limiter name never share overrides. `rules` is a rule list in the one rule
-- schema, validated by the service before it is written.
CREATE TABLE arkvory_rule_overrides (
  service text NOT NULL CHECK (service ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
  limiter text NOT NULL CHECK (limiter ~ '^[a-z0-9_]{1,64}$'),
  subject_kind text NOT NULL CHECK (subject_kind IN ('principal', 'repository')),
  subject text NOT NULL CHECK (length(subject) BETWEEN 1 AND 256),
  rules jsonb NOT NULL CHECK (jsonb_typeof(rules) = 'array'),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (service, limiter, subject_kind, subject)
);

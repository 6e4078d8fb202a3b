-- The grants of arkvory_principals and arkvory_grants change with this migration (migrations/grants.ts):
-- the completion worker now reads whether a multipart session's principal is still enabled and still
-- holds write on its repository before it publishes the completion (docs/auth.md). `migrate`
-- re-applies grants.ts after the migrations it runs, which is what carries the new grants to a
-- database whose roles exist (a worker login without them is refused at start); this migration
-- records who reads the tables on the tables.
COMMENT ON TABLE arkvory_grants IS
  'Each principal''s permission on a repository: read by every gateway and by the completion worker before it publishes.';

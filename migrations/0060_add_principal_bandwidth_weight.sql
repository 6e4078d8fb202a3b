-- Each principal's bandwidth weight (issue 40): under contention for a direction's ceiling, the
-- principals transferring share it in proportion to their weights (docs/bandwidth-and-admission.md).
-- 1..1000, default 1 (every principal equal, as before). A change bumps the auth epoch through the
-- existing statement trigger, so every gateway's key cache (which carries the weight) drops it.
ALTER TABLE arkvory_principals
  ADD COLUMN bandwidth_weight integer NOT NULL DEFAULT 1 CHECK (bandwidth_weight BETWEEN 1 AND 1000);

-- Peers a gateway saw sending X-Forwarded-For/Forwarded without being in its ARKVORY_TRUSTED_PROXIES
-- (usually a router or proxy left out of the list). Written at most once an hour per peer and
-- gateway process; read by `arkvory doctor`, which reports the ones its own configuration does not trust.
CREATE TABLE arkvory_forwarding_peers (
  peer text NOT NULL,
  role text NOT NULL,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (peer, role)
);

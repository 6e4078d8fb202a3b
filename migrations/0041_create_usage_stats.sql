-- Usage statistics (docs/observability.md): what is downloaded, by whom, when last; and each
-- principal's requests and bytes per day. Gateways count in memory and add their counts here in
-- batches (one statement per table per flush), so rows are sums over every gateway. No foreign
-- keys: an artifact deleted or a principal removed keeps its history until an operator clears it.
CREATE TABLE arkvory_usage_artifacts (
  repository text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('artifact', 'package', 'asset')),
  name text NOT NULL,
  version text NOT NULL DEFAULT '',
  asset text NOT NULL DEFAULT '',
  downloads bigint NOT NULL CHECK (downloads >= 0),
  bytes bigint NOT NULL CHECK (bytes >= 0),
  last_downloaded_at timestamptz NOT NULL,
  last_downloader uuid,
  PRIMARY KEY (repository, kind, name, version, asset)
);
CREATE INDEX arkvory_usage_artifacts_downloads ON arkvory_usage_artifacts (downloads DESC);

CREATE TABLE arkvory_usage_principal_days (
  principal_id uuid NOT NULL,
  day date NOT NULL,
  requests bigint NOT NULL CHECK (requests >= 0),
  bytes_down bigint NOT NULL CHECK (bytes_down >= 0),
  bytes_up bigint NOT NULL CHECK (bytes_up >= 0),
  PRIMARY KEY (principal_id, day)
);
CREATE INDEX arkvory_usage_principal_days_day ON arkvory_usage_principal_days (day);

/** What every gateway cache reports for metrics (`arkvory_cache_*{cache}`), read at scrape time. */
export interface CacheStats {
  /** `catalog`, `open_file` or `blob`. */
  readonly cache: string;
  readonly hits: number;
  readonly misses: number;
  readonly entries: number;
  readonly bytes: number;
}

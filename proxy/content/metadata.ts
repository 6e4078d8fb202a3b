import type { CatalogEntry } from '../../storage-adapter/catalog/catalog.ts';
import { formatContentDigest } from './digest.ts';
import { pathOfKey } from './paths.ts';

/**
 * The JSON shape of one published object (metadata route, upload answers). `prefix`: the path the
 * client reaches the gateway under (`publicBase`), before `contentUrl`'s path.
 */
export function metadataOf(entry: CatalogEntry, prefix = ''): Record<string, unknown> {
  const names: Record<string, string> =
    entry.kind === 'artifact'
      ? { id: entry.name }
      : entry.kind === 'package'
        ? { name: entry.name, version: entry.version }
        : { name: entry.name, version: entry.version, asset: entry.asset };
  return {
    repository: entry.repository,
    kind: entry.kind,
    ...names,
    sha256: entry.sha256,
    digest: formatContentDigest(entry.sha256),
    sizeBytes: entry.sizeBytes,
    contentType: entry.contentType,
    createdAt: new Date(entry.createdAtMs).toISOString(),
    publishedBy: entry.publishedBy,
    contentUrl: `${prefix}${pathOfKey(entry)}/content`,
  };
}

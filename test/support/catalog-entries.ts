/** A catalog row to insert in tests: an artifact of one byte whose sha256 is `digit` repeated. */
import type { NewCatalogEntry } from '../../storage-adapter/catalog/catalog.ts';

export function artifactEntry(repository: string, name: string, digit: string): NewCatalogEntry {
  return {
    repository,
    kind: 'artifact',
    name,
    version: '',
    asset: '',
    sha256: digit.repeat(64),
    sizeBytes: 1,
    contentType: 'application/octet-stream',
    publishedBy: null,
  };
}

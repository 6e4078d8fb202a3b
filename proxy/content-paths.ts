/**
 * Pure mapping between the v1 content URLs and catalog keys. Each kind of published object has a
 * base path (PUT/DELETE/GET metadata) and the same path plus `/content` (GET/HEAD bytes).
 */
import type { ArtifactKey, ArtifactKind } from '../storage-adapter/catalog.ts';
import { GatewayError } from './errors.ts';

export const CONTENT_TEMPLATES: Readonly<Record<ArtifactKind, string>> = {
  artifact: '/api/v1/repositories/:repo/artifacts/:id',
  package: '/api/v1/repositories/:repo/packages/:name/:version',
  asset: '/api/v1/repositories/:repo/packages/:name/:version/assets/:asset',
};

/** Printable, 1..255 characters; the router already refuses '', '.', '..', '/', '\\' and NUL. */
const NAME = /^[^\u0000-\u001f\u007f]{1,255}$/u;

function checkName(value: string | undefined, what: string): string {
  if (value === undefined || !NAME.test(value)) throw new GatewayError('invalid_request', `The ${what} must be 1 to 255 printable characters.`);
  return value;
}

export function keyFromParams(kind: ArtifactKind, params: Readonly<Record<string, string>>): ArtifactKey {
  const repository = params.repo;
  if (repository === undefined) throw new Error('content route without :repo');
  switch (kind) {
    case 'artifact':
      return { repository, kind, name: checkName(params.id, 'artifact id'), version: '', asset: '' };
    case 'package':
      return { repository, kind, name: checkName(params.name, 'package name'), version: checkName(params.version, 'package version'), asset: '' };
    case 'asset':
      return { repository, kind, name: checkName(params.name, 'package name'), version: checkName(params.version, 'package version'), asset: checkName(params.asset, 'asset name') };
  }
}

/** The base URL of a key (its metadata and upload path), segments percent-encoded. */
export function pathOfKey(key: ArtifactKey): string {
  const e = encodeURIComponent;
  const base = `/api/v1/repositories/${e(key.repository)}`;
  switch (key.kind) {
    case 'artifact':
      return `${base}/artifacts/${e(key.name)}`;
    case 'package':
      return `${base}/packages/${e(key.name)}/${e(key.version)}`;
    case 'asset':
      return `${base}/packages/${e(key.name)}/${e(key.version)}/assets/${e(key.asset)}`;
  }
}

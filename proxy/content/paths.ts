/**
 * Pure mapping between the v1 content URLs and catalog keys. Each kind of published object has a
 * base path (PUT/DELETE/GET metadata) and the same path plus `/content` (GET/HEAD bytes). A package
 * version is also readable as a flat apt repository: `…/apt/{file}` is the bytes of its asset `{file}`.
 */
import type { ArtifactKey, ArtifactKind } from '../../storage-adapter/catalog/catalog.ts';
import { GatewayError } from '../server/errors.ts';

export const CONTENT_TEMPLATES: Readonly<Record<ArtifactKind, string>> = {
  artifact: '/api/v1/repositories/:repo/artifacts/:id',
  package: '/api/v1/repositories/:repo/packages/:name/:version',
  asset: '/api/v1/repositories/:repo/packages/:name/:version/assets/:asset',
};

/**
 * A package version as a flat apt repository (docs/clients.md): apt appends `Release`, `Packages`
 * and each `.deb`'s `Filename` to the base `…/apt/`, so the asset's bytes are served at that plain
 * path, without `/content`. apt asks for `…/apt/./Packages`; the URL parser drops the `.`.
 */
export const APT_TEMPLATE = `${CONTENT_TEMPLATES.package}/apt/:file`;

/**
 * Names (artifact id, package name and version, asset name) are stored in Unicode NFC, so `café`
 * typed composed or decomposed is one artifact. Refused with 400 `invalid_request`: control
 * characters (C0, DEL, C1), format characters (bidirectional overrides and isolates, zero-width
 * characters, BOM: they make a name display as another), and look-alikes of `.` (full-width and
 * small full stops, one-dot leaders), which could pass for `.`/`..` in a listing or a path. The
 * router already refuses '', '.', '..', '/', '\\' and NUL in the raw segment.
 */
const REFUSED = /[\p{Cc}\p{Cf}\u2024\u2025\uFE52\uFF0E\uFF61]/u;
/** Printable ASCII: none of it is refused, and NFC leaves it as it is (the common name skips both). */
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;
const MAX_NAME_LENGTH = 255;

export function normalizeName(value: string | undefined, what: string): string {
  if (value === undefined || value.length === 0)
    throw new GatewayError('invalid_request', `The ${what} must not be empty.`);
  if (PRINTABLE_ASCII.test(value)) return checkedName(value, what);
  const refused = REFUSED.exec(value);
  if (refused) {
    const code = refused[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
    throw new GatewayError(
      'invalid_request',
      `The ${what} contains U+${code}: control, formatting (bidirectional, zero-width) and dot look-alike characters are not allowed.`,
    );
  }
  return checkedName(value.normalize('NFC'), what);
}

function checkedName(name: string, what: string): string {
  if (name.length > MAX_NAME_LENGTH)
    throw new GatewayError('invalid_request', `The ${what} must be at most ${MAX_NAME_LENGTH} characters.`);
  if (name === '.' || name === '..') throw new GatewayError('invalid_request', `The ${what} must not be "." or "..".`);
  return name;
}

export function keyFromParams(kind: ArtifactKind, params: Readonly<Record<string, string>>): ArtifactKey {
  const repository = params.repo;
  if (repository === undefined) throw new Error('content route without :repo');
  switch (kind) {
    case 'artifact':
      return { repository, kind, name: normalizeName(params.id, 'artifact id'), version: '', asset: '' };
    case 'package':
      return {
        repository,
        kind,
        name: normalizeName(params.name, 'package name'),
        version: normalizeName(params.version, 'package version'),
        asset: '',
      };
    case 'asset':
      return {
        repository,
        kind,
        name: normalizeName(params.name, 'package name'),
        version: normalizeName(params.version, 'package version'),
        asset: normalizeName(params.asset, 'asset name'),
      };
  }
}

/** The asset an apt route names: `:file` of the package version `:name`/`:version`. */
export function aptAssetKey(params: Readonly<Record<string, string>>): ArtifactKey {
  return keyFromParams('asset', { ...params, asset: params.file ?? '' });
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

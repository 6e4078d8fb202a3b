/**
 * The static-HTTP store's tree (scrub, gc, backup): listings come from the server's JSON autoindex
 * (nginx `autoindex on; autoindex_format json;`), reads, removals and moves through WebDAV.
 */
import { BODY_CAPS, drainBody, readBoundedText } from '../streaming/bounded-body.ts';
import { unexpectedStatus } from '../streaming/http-upstream.ts';
import { listedName } from '../streaming/listed-names.ts';
import type { WebDavClient } from './http-webdav.ts';
import { sessionRelativeDir, STORAGE_ID_FILE } from '../paths.ts';
import { type ExclusiveTokens, type IdentityObject, replaceExclusively } from '../identity.ts';
import type { PartStore, StoreTree, TreeEntry } from '../store.ts';

export function httpTree(dav: WebDavClient): StoreTree {
  const { location } = dav;
  return {
    location,
    async list(dir) {
      const target = `${dav.pathOf(dir)}/`;
      const res = await dav.call({ method: 'GET', path: target, headers: { accept: 'application/json' } });
      if (res.statusCode !== 200) {
        await drainBody(res.body, dav.timeoutMs);
        if (res.statusCode === 404) return [];
        throw unexpectedStatus(res.statusCode, `GET ${target}`);
      }
      const text = await readBoundedText(
        res.body,
        { capBytes: BODY_CAPS.autoindex, timeoutMs: dav.timeoutMs },
        `GET ${target}`,
      );
      let entries: Array<{ name?: unknown; type?: unknown; size?: unknown } | null>;
      try {
        entries = JSON.parse(text) as typeof entries;
        if (!Array.isArray(entries)) throw new Error('not a list');
      } catch {
        throw new Error(
          `GET ${location}${dir}/ did not return a JSON listing; scrub and gc need \`autoindex on; autoindex_format json;\` on the store`,
        );
      }
      return entries.map(
        (e): TreeEntry => ({
          // Joined onto `dir` and then deleted or moved by gc and scrub: one plain segment only.
          name: listedName(typeof e?.name === 'string' ? e.name : '', `${location}${dir}/`),
          isDirectory: e?.type === 'directory',
          sizeBytes: Number(e?.size ?? 0),
        }),
      );
    },
    read: (file) => dav.get(file),
    remove: (file) => dav.remove(file),
    // Without MOVE a GET+PUT+DELETE through us: with `expected` the copy must be those bytes before
    // the source goes (http-webdav.ts move).
    async move(from, to, expected) {
      await dav.move(from, to, true, expected);
    },
  };
}

/** Multipart part files under `uploads/<session>/`. A part whose PUT failed is removed. */
export function httpParts(dav: WebDavClient): PartStore {
  return {
    async write(sessionId, fileName, body, signal) {
      const name = `${sessionRelativeDir(sessionId)}/${fileName}`;
      try {
        await dav.put(name, body, signal);
      } catch (err) {
        await dav.remove(name).catch(() => {});
        throw err;
      }
    },
    read: (sessionId, fileName, signal) => dav.get(`${sessionRelativeDir(sessionId)}/${fileName}`, signal),
    async has(sessionId, fileName) {
      const path = dav.pathOf(`${sessionRelativeDir(sessionId)}/${fileName}`);
      const code = await dav.status({ method: 'HEAD', path });
      if (code === 200) return true;
      if (code === 404) return false;
      throw unexpectedStatus(code, `HEAD ${path}`);
    },
    remove: (sessionId, fileName) => dav.remove(`${sessionRelativeDir(sessionId)}/${fileName}`),
    removeSession: (sessionId) => dav.remove(sessionRelativeDir(sessionId)),
  };
}

/**
 * Tokens as collections (WebDAV MKCOL: nginx's mkdir(2), which fails with 405 when the name exists),
 * since a PUT has no exclusive form there: nginx's dav module ignores `If-None-Match: *` on a PUT.
 * A server without MKCOL (not in nginx's `dav_methods`) also answers 405, the name absent: then a token
 * cannot be held and every create succeeds, the replacement being the plain check and write it was.
 */
function httpTokens(dav: WebDavClient): ExclusiveTokens {
  return {
    async create(name) {
      const path = `${dav.pathOf(name)}/`;
      let code = await dav.status({ method: 'MKCOL', path });
      if (code === 409) {
        await dav.makeBaseCollections();
        code = await dav.status({ method: 'MKCOL', path });
      }
      if (code === 201) return true;
      if (code !== 405 && code !== 501) throw unexpectedStatus(code, `MKCOL ${path}`);
      if (code === 501) return true;
      const there = await dav.status({ method: 'GET', path });
      return there === 404;
    },
    remove: (name) => dav.remove(name),
  };
}

/** The `storage-id` object at the store's root. */
export function httpIdentity(dav: WebDavClient): IdentityObject {
  const path = dav.pathOf(STORAGE_ID_FILE);
  const object: IdentityObject = {
    root: dav.location,
    name: `${dav.location}${STORAGE_ID_FILE}`,
    variable: 'ARKVORY_STORAGE_URL',
    async read() {
      const res = await dav.call({ method: 'GET', path });
      if (res.statusCode !== 200) {
        await drainBody(res.body, dav.timeoutMs);
        if (res.statusCode === 404) return undefined;
        throw unexpectedStatus(res.statusCode, `GET ${path}`);
      }
      return readBoundedText(res.body, { capBytes: BODY_CAPS.small, timeoutMs: dav.timeoutMs }, `GET ${path}`);
    },
    async write(id) {
      // nginx writes a PUT body to a temporary file and renames it: readers see all or nothing.
      await dav.put(
        STORAGE_ID_FILE,
        (async function* () {
          yield Buffer.from(`${id}\n`);
        })(),
      );
    },
    claim: (text) => replaceExclusively(object, httpTokens(dav), undefined, text),
    takeOver: (from, text) => replaceExclusively(object, httpTokens(dav), from, text),
  };
  return object;
}

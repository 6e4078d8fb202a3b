/** The static-HTTP store: reads with GET and Range, writes through WebDAV (nginx `dav_methods`). */
export { openHttpStore, readStorageIdObject, type HttpStoreOptions } from './http-store.ts';

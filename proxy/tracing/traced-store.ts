/**
 * The store as traced requests use it: `arkvory.store.open` spans each `openBlob` of a traced
 * request, and `arkvory.store.first_byte` the wait from the open to the first bytes read. A request
 * outside a trace (or unsampled) goes straight through.
 */
import { context, type Span, trace, type Tracer } from '@opentelemetry/api';
import type { ArtifactStore, BlobReader } from '../../storage-adapter/store.ts';
import { endFailed } from './request-trace.ts';

function firstByteWatched(reader: BlobReader, span: Span): BlobReader {
  let pending: Span | undefined = span;
  const done = () => {
    pending?.end();
    pending = undefined;
  };
  const watched: BlobReader = Object.create(reader) as BlobReader;
  return Object.assign(watched, {
    read: (buffer: Buffer, offset: number, length: number, position: number) =>
      reader.read(buffer, offset, length, position).then((r) => {
        done();
        return r;
      }),
    ...(reader.chunks
      ? {
          chunks: (range: Parameters<NonNullable<BlobReader['chunks']>>[0], signal: AbortSignal) =>
            (async function* () {
              for await (const chunk of reader.chunks!(range, signal)) {
                done();
                yield chunk;
              }
            })(),
        }
      : {}),
    close: () => {
      done();
      return reader.close();
    },
  });
}

export function traceStore<S extends ArtifactStore>(store: S, tracer: Tracer): S {
  const openBlob: ArtifactStore['openBlob'] = (sha256, ranges) => {
    const active = context.active();
    if (!trace.getSpan(active)?.isRecording()) return store.openBlob(sha256, ranges);
    const span = tracer.startSpan('arkvory.store.open', { attributes: { 'arkvory.store.kind': store.kind } }, active);
    return context
      .with(trace.setSpan(active, span), () => store.openBlob(sha256, ranges))
      .then(
        (reader) => {
          span.end();
          if (reader.bytes !== undefined) return reader;
          const firstByte = tracer.startSpan('arkvory.store.first_byte', {}, active);
          return firstByteWatched(reader, firstByte);
        },
        (err: unknown) => {
          endFailed(span, err);
          throw err;
        },
      );
  };
  // Each method bound once, not on every call: the small-object path calls the store per request.
  const bound = new Map<PropertyKey, { of: unknown; fn: unknown }>();
  return new Proxy(store, {
    get(target, key) {
      if (key === 'openBlob') return openBlob;
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== 'function') return value;
      let entry = bound.get(key);
      if (entry?.of !== value) {
        entry = { of: value, fn: (value as (...args: unknown[]) => unknown).bind(target) };
        bound.set(key, entry);
      }
      return entry.fn;
    },
  });
}

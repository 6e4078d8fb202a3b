import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect, it } from 'vitest';
import { loadConfig } from '../config/config.ts';
import { createLogger } from '../server/logger.ts';
import { openTracing } from './tracing.ts';

it('the start-up line names the OTLP endpoint without its user info or query', async () => {
  const lines: string[] = [];
  const log = createLogger('info', { write: (line: string) => lines.push(line) });
  const config = loadConfig({
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://tenant:0tlpS3cret@127.0.0.1:4318/v1/traces?api_key=QUERYTOKEN',
  }).tracing;
  const tracing = openTracing(config!, { role: 'api', log });
  await tracing.shutdown();
  const started = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'tracing: spans exported over OTLP/HTTP');
  expect(started?.endpoint).toBe('https://<redacted>@127.0.0.1:4318/v1/traces?<redacted>');
  expect(lines.join('')).not.toMatch(/0tlpS3cret|QUERYTOKEN|tenant/);
});

it("a client's oversized tracestate is held as the members kept, not as the header it came in", async () => {
  const log = createLogger('silent', { write: () => {} });
  const config = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' }).tracing;
  const tracing = openTracing(config!, { role: 'api', log });
  const server = http.createServer((req, res) => {
    // Never ended: no export to wait for at shutdown.
    const request = tracing.startServer(req, () => true);
    const state = request.span.spanContext().traceState;
    // What the span holds of it, with every field, against what it stands for.
    res.end(
      JSON.stringify({ traceId: request.traceId, held: JSON.stringify(state).length, members: state?.serialize() }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const ask = (headers: Record<string, string>) =>
      fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { headers }).then(
        (r) => r.json() as Promise<{ traceId: string; held: number; members: string }>,
      );
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    // 12,000 characters: a member that is kept, then members past 512 characters and malformed ones.
    const tracestate = ['congo=t61rcWkgMzE', ...Array.from({ length: 1500 }, (_, i) => `k${i}=${'v'.repeat(3)}`)]
      .join(',')
      .concat(`,${'x'.repeat(1000)}`);
    expect(tracestate.length).toBeGreaterThan(12_000);
    const answer = await ask({ traceparent, tracestate });
    expect(answer.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    // The members that fit in 512 characters, in order, and no more than them held.
    expect(answer.members.startsWith('congo=t61rcWkgMzE,k0=vvv,k1=vvv,')).toBe(true);
    expect(answer.members.length).toBeLessThanOrEqual(512);
    expect(answer.held).toBeLessThan(2 * 512);
    // A short one is kept as it came.
    const short = await ask({ traceparent, tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7' });
    expect(short.members).toBe('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
  } finally {
    server.close();
    await tracing.shutdown();
  }
});

it('a traceparent is continued only when well formed and from a peer allowed to; anything else starts a new trace', async () => {
  const log = createLogger('silent', { write: () => {} });
  const config = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' }).tracing;
  const tracing = openTracing(config!, { role: 'api', log });
  let allowed = true;
  const server = http.createServer((req, res) => {
    // Never ended: no export to wait for at shutdown.
    res.end(tracing.startServer(req, () => allowed).traceId);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const id = '4bf92f3577b34da6a3ce929d0e0e4736';
  const span = '00f067aa0ba902b7';
  const traceIdFor = (traceparent: string) =>
    fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { headers: { traceparent } }).then((r) =>
      r.text(),
    );
  try {
    expect(await traceIdFor(`00-${id}-${span}-01`)).toBe(id);
    // A later version may add fields; its ids are taken.
    expect(await traceIdFor(`01-${id}-${span}-01-${'x'.repeat(8000)}`)).toBe(id);
    for (const malformed of [
      `00-${id.toUpperCase()}-${span}-01`,
      `ff-${id}-${span}-01`,
      `00-${'0'.repeat(32)}-${span}-01`,
      `00-${id}-${'0'.repeat(16)}-01`,
      `00-${id}-${span}-01-extra`,
      // Two headers, joined as node:http joins them.
      `00-${id}-${span}-01, 00-${id}-${span}-01`,
      `00-${id}-${span}`,
      'x'.repeat(8000),
    ]) {
      const traceId = await traceIdFor(malformed);
      expect(traceId, malformed.slice(0, 80)).not.toBe(id);
      expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    }
    allowed = false;
    expect(await traceIdFor(`00-${id}-${span}-01`)).not.toBe(id);
  } finally {
    server.close();
    await tracing.shutdown();
  }
});

it("url.scheme is the client's by the gateway's rule: a trusted proxy's word, never a client's own", async () => {
  const log = createLogger('silent', { write: () => {} });
  const config = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' }).tracing;
  const behindProxy = openTracing(config!, { role: 'api', log, trustedProxies: ['127.0.0.1'] });
  const direct = openTracing(config!, { role: 'api', log });
  const schemes = (tracing: typeof direct) =>
    http.createServer((req, res) => {
      // Never ended: no export to wait for at shutdown.
      const { span } = tracing.startServer(req, () => false);
      res.end(String((span as unknown as { attributes: Record<string, unknown> }).attributes['url.scheme']));
    });
  const servers = [schemes(behindProxy), schemes(direct)];
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))));
  const ask = (server: http.Server, headers: Record<string, string> = {}) =>
    fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { headers }).then((r) => r.text());
  try {
    const [trusted, untrusted] = servers as [http.Server, http.Server];
    expect(await ask(trusted)).toBe('http');
    expect(await ask(trusted, { 'x-forwarded-proto': 'https' })).toBe('https');
    // The last entry is the trusted proxy's own; one a client sent sits before it.
    expect(await ask(trusted, { 'x-forwarded-proto': 'https, http' })).toBe('http');
    expect(await ask(trusted, { forwarded: 'for=192.0.2.1;proto=https' })).toBe('https');
    // From a peer that is no trusted proxy, the listener's scheme, whatever the request says.
    expect(await ask(untrusted, { 'x-forwarded-proto': 'https' })).toBe('http');
    expect(await ask(untrusted, { forwarded: 'proto=https' })).toBe('http');
  } finally {
    for (const s of servers) s.close();
    await Promise.all([behindProxy.shutdown(), direct.shutdown()]);
  }
});

it("a trusted peer's `arkvory=untrusted` member keeps the trace id but not the flag; the member is never passed on", async () => {
  const log = createLogger('silent', { write: () => {} });
  // No new trace sampled: whatever is sampled follows a parent's flag.
  const config = loadConfig({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9',
    OTEL_TRACES_SAMPLER: 'parentbased_always_off',
  }).tracing;
  const behindRouter = openTracing(config!, { role: 'api', log, trustedProxies: ['127.0.0.1'] });
  const direct = openTracing(config!, { role: 'api', log });
  const serve = (tracing: typeof direct) =>
    http.createServer((req, res) => {
      // Never ended: no export to wait for at shutdown.
      const request = tracing.startServer(req, () => true);
      res.end(
        JSON.stringify({
          traceId: request.traceId,
          sampled: request.span.isRecording(),
          state: request.span.spanContext().traceState?.serialize(),
          sent: tracing.headersOf(request),
        }),
      );
    });
  const servers = [serve(behindRouter), serve(direct)];
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))));
  const id = '4bf92f3577b34da6a3ce929d0e0e4736';
  const ask = (server: http.Server, tracestate?: string) =>
    fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
      headers: { traceparent: `00-${id}-00f067aa0ba902b7-01`, ...(tracestate === undefined ? {} : { tracestate }) },
    }).then((r) => r.json() as Promise<{ traceId: string; sampled: boolean; state?: string; sent: string[] }>);
  try {
    const [trusted, untrusted] = servers as [http.Server, http.Server];
    // A trusted peer's flag is followed...
    expect(await ask(trusted, 'client=chosen')).toMatchObject({ traceId: id, sampled: true, state: 'client=chosen' });
    // ...unless it marked the context as an untrusted client's: the trace id is kept, the flag is not followed.
    expect(await ask(trusted, 'arkvory=untrusted,client=chosen')).toMatchObject({
      traceId: id,
      sampled: false,
      state: 'client=chosen',
    });
    // The member alone: no `tracestate` left to send on.
    const alone = await ask(trusted, 'arkvory=untrusted');
    expect(alone).toMatchObject({ traceId: id, sampled: false });
    expect(alone.state).toBeUndefined();
    expect(alone.sent).not.toContain('tracestate');
    expect(alone.sent).toContain('traceparent');
    // Another value of the key says nothing, and is not passed on either.
    expect(await ask(trusted, 'client=chosen,arkvory=trusted')).toMatchObject({
      sampled: true,
      state: 'client=chosen',
    });
    // From an untrusted peer the member is taken out too (its flag is not followed anyway).
    expect(await ask(untrusted, 'arkvory=untrusted,client=chosen')).toMatchObject({
      traceId: id,
      sampled: false,
      state: 'client=chosen',
    });
  } finally {
    for (const s of servers) s.close();
    await Promise.all([behindRouter.shutdown(), direct.shutdown()]);
  }
});

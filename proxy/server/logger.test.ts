import { describe, expect, it } from 'vitest';
import { createLogger } from './logger.ts';

/** The lines a real logger writes, parsed. */
function capture(): {
  log: ReturnType<typeof createLogger>;
  lines: () => Record<string, unknown>[];
  text: () => string;
} {
  const written: string[] = [];
  const log = createLogger('info', { write: (line: string) => written.push(line) });
  return { log, lines: () => written.map((l) => JSON.parse(l)), text: () => written.join('') };
}

describe('the logger never writes a secret', () => {
  it('in headers of any spelling, in an error, in arrays, deep down, in session fields, in bindings', () => {
    const { log, text } = capture();
    log.info(
      {
        headers: {
          'proxy-authorization': 'Basic PXA-S3CRET',
          Authorization: 'Bearer CAP-S3CRET',
          'x-api-key': 'XAK-S3CRET',
          'X-Api-Key': 'XAK2-S3CRET',
          Cookie: 'COOKIE-S3CRET',
          'Set-Cookie': ['SETCOOKIE-S3CRET'],
        },
        req: { headers: { 'Proxy-Authorization': 'Basic REQPXA-S3CRET', 'x-api-key': 'REQXAK-S3CRET' } },
      },
      'headers',
    );
    const err = Object.assign(new Error('upstream refused', { cause: { token: 'CAUSE-S3CRET' } }), {
      config: { headers: { authorization: 'Bearer ERRCFG-S3CRET', Authorization: 'Bearer ERRCFG2-S3CRET' } },
      response: { config: { headers: { 'proxy-authorization': 'ERRRESP-S3CRET' } } },
    });
    log.error({ err }, 'error');
    log.info(
      {
        keys: [{ token: 'ARR-S3CRET' }, { headers: { authorization: 'ARR2-S3CRET' } }, [{ password: 'ARR3-S3CRET' }]],
        a: { b: { c: { d: { e: { password: 'DEEP-S3CRET', apiKey: 'DEEPKEY-S3CRET', secret: 'DEEPSEC-S3CRET' } } } } },
      },
      'nested',
    );
    log.info(
      {
        sessionCookie: 'SC-S3CRET',
        csrfToken: 'CSRF-S3CRET',
        console: { session: { sessionCookie: 'SC2-S3CRET', csrfToken: 'CSRF2-S3CRET' } },
      },
      'session',
    );
    log.child({ headers: { authorization: 'CHILD-S3CRET', 'x-api-key': 'CHILDXAK-S3CRET' } }).info('child');
    log.info('interpolated %o', { authorization: 'FMT-S3CRET' });
    expect(text()).not.toContain('S3CRET');
  });

  it('keeps everything else, and never changes the object it was handed', () => {
    const { log, lines } = capture();
    const frozen = Object.freeze({ nested: Object.freeze({ password: 'FROZEN-S3CRET', user: 'ci' }) });
    const cyclic: Record<string, unknown> = { password: 'CYCLE-S3CRET', name: 'loop' };
    cyclic.self = cyclic;
    const err = Object.assign(new Error('boom'), {
      code: 'E_BOOM',
      config: { headers: { authorization: 'A-S3CRET' } },
    });
    log.info({ frozen, cyclic, err, store: { op: { key: 'blobs/ab/cd' } }, body: Buffer.from('x') }, 'kept');
    const [line] = lines();
    expect(line).toMatchObject({
      msg: 'kept',
      frozen: { nested: { password: '[redacted]', user: 'ci' } },
      cyclic: { password: '[redacted]', name: 'loop', self: '[Circular]' },
      err: { type: 'Error', message: 'boom', code: 'E_BOOM', config: { headers: { authorization: '[redacted]' } } },
      // Deep down, `key` is an object's name, not a credential.
      store: { op: { key: 'blobs/ab/cd' } },
    });
    expect((line!.err as { stack: string }).stack).toContain('Error: boom');
    expect(JSON.stringify(line)).not.toContain('S3CRET');
    expect(frozen.nested.password).toBe('FROZEN-S3CRET');
    expect(cyclic.password).toBe('CYCLE-S3CRET');
    expect((err.config.headers as { authorization: string }).authorization).toBe('A-S3CRET');
  });
});

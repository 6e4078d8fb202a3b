/**
 * `/health/status` of a worker whose reads of its instance (the `before` steps) fail: `unavailable`
 * from its coordinating process is a 503 naming why, with what was read last; a draining process
 * still says `draining`; any other failure is not taken for an unanswered instance.
 */
import { describe, expect, it } from 'vitest';
import { PolicyError } from '../../policy/errors.ts';
import { liveAndStatusRoutes } from './health-routes.ts';
import { Lifecycle } from './lifecycle.ts';
import type { RequestContext } from './route-types.ts';

/** The status route's answer, read off a stand-in response. */
async function status(lifecycle: Lifecycle, before: Array<() => Promise<void>>) {
  const route = liveAndStatusRoutes(lifecycle, [() => ({ workerIndex: 1, workers: [] })], before).find(
    (r) => r.template === '/health/status',
  )!;
  const seen = { code: 0, body: {} as Record<string, unknown> };
  const res = {
    req: { method: 'GET' },
    writeHead(code: number) {
      seen.code = code;
    },
    end(text: string) {
      seen.body = JSON.parse(text) as Record<string, unknown>;
    },
  };
  await route.handle({ res } as unknown as RequestContext);
  return seen;
}

const unanswered = () =>
  Promise.reject(
    new PolicyError('unavailable', 'The coordinating process of this instance did not answer within 2 s.'),
  );

describe('/health/status when the instance does not answer', () => {
  it('is 503 unavailable with the reason and the rest of the answer', async () => {
    const lifecycle = new Lifecycle();
    lifecycle.set('serving');
    expect(await status(lifecycle, [async () => {}, unanswered])).toEqual({
      code: 503,
      body: {
        status: 'unavailable',
        reason: 'The coordinating process of this instance did not answer within 2 s.',
        workerIndex: 1,
        workers: [],
      },
    });
    expect(await status(lifecycle, [async () => {}])).toMatchObject({ code: 200, body: { status: 'serving' } });
  });

  it('a process draining still says so', async () => {
    const lifecycle = new Lifecycle();
    lifecycle.set('draining');
    expect(await status(lifecycle, [unanswered])).toMatchObject({ code: 503, body: { status: 'draining' } });
  });

  it('another failure is thrown as it is, not answered as an unanswered instance', async () => {
    const lifecycle = new Lifecycle();
    lifecycle.set('serving');
    await expect(status(lifecycle, [() => Promise.reject(new Error('bug'))])).rejects.toThrow('bug');
  });
});

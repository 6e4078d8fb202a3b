/** What the server hands the usage recorder for one finished download, made up for its tests. */
import { CONTENT_TEMPLATES } from '../../proxy/content/paths.ts';
import type { RequestContext, RequestObservation } from '../../proxy/server/route-types.ts';
import type { UsageRecorder } from '../../proxy/stats/usage-recorder.ts';

const route = `${CONTENT_TEMPLATES.artifact}/content`;

/** The principal id numbered `n` (a UUID, as the usage tables take). */
export const principalNumbered = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/**
 * Principal `n` downloads artifact `a<n>.bin` of repository `r` whole (10 bytes): one request and
 * one download, each on a row of its own when `n` is new.
 */
export function observeDownload(recorder: Pick<UsageRecorder, 'observe'>, n: number): void {
  const ctx = {
    principal: { id: principalNumbered(n) },
    params: { repo: 'r', id: `a${n}.bin` },
    req: { headers: {}, complete: true },
    res: { writableFinished: true, declaredLength: 10 },
  } as unknown as RequestContext;
  const o: RequestObservation = { method: 'GET', route, status: 200, seconds: 0, bytesIn: 100, bytesOut: 10 };
  recorder.observe(ctx, o);
}

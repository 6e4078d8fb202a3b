/** A multipart session opened and its parts uploaded over HTTP, each answer checked: the usual start of a completion test. */
import { expect } from 'vitest';
import { bearer } from './auth.ts';
import { request } from './content.ts';

/**
 * Opens a session for `artifact` under `repoUrl` (`…/api/v1/repositories/<repo>`) with `session` as
 * its JSON body (201), then PUTs `parts` as parts 1, 2, … (200 each). Returns the session's id.
 */
export async function openUploadWithParts(
  repoUrl: string,
  artifact: string,
  key: string,
  parts: readonly Buffer[],
  session: Record<string, unknown> = {},
): Promise<string> {
  const opened = await request(`${repoUrl}/artifacts/${artifact}/uploads`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(session)),
  });
  expect(opened.status, opened.body.toString()).toBe(201);
  const upload = (JSON.parse(opened.body.toString()) as { upload: string }).upload;
  for (const [i, part] of parts.entries()) {
    const r = await request(`${repoUrl}/uploads/${upload}/parts/${i + 1}`, {
      method: 'PUT',
      headers: bearer(key),
      body: part,
    });
    expect(r.status, r.body.toString()).toBe(200);
  }
  return upload;
}

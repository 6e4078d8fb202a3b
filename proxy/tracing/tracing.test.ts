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

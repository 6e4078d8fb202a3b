/**
 * The tracing slice of the configuration from the OTEL_* variables (tracing-variables.ts): off
 * unless an OTLP endpoint is set, the exporter is `otlp` and the SDK is not disabled.
 */
import type { TracingConfig } from './types.ts';
import type { VariableValues } from './variable-values.ts';

/** `k=v,k2=v2` (W3C Baggage-like, values percent-decoded) as pairs; undefined when malformed. */
export function parseKeyValueList(text: string): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) return undefined;
    const key = part.slice(0, eq).trim();
    let value: string;
    try {
      value = decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      return undefined;
    }
    if (key === '') return undefined;
    out[key] = value;
  }
  return out;
}

/** Undefined when tracing is off; problems (never a header value) go to `v.problems`. */
export function checkTracing(v: VariableValues): TracingConfig | undefined {
  const names = [
    'OTEL_EXPORTER_OTLP_HEADERS',
    'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
    'OTEL_RESOURCE_ATTRIBUTES',
    'OTEL_TRACES_SAMPLER_ARG',
  ] as const;
  const parsed: Partial<Record<(typeof names)[number], Record<string, string>>> = {};
  for (const name of names.slice(0, 3) as readonly (typeof names)[number][]) {
    const text = v.optStr(name);
    if (text === undefined) continue;
    const pairs = parseKeyValueList(text);
    if (pairs) parsed[name] = pairs;
    else v.problems.push(`${name}: expected key=value pairs separated by commas`);
  }
  let ratio = 1;
  const arg = v.optStr('OTEL_TRACES_SAMPLER_ARG');
  if (arg !== undefined) {
    ratio = Number(arg);
    if (!/^\s*(0|1|0?\.\d+|1\.0*)\s*$/.test(arg) || !(ratio >= 0 && ratio <= 1))
      v.problems.push(`OTEL_TRACES_SAMPLER_ARG: expected a ratio from 0 to 1, got ${JSON.stringify(arg)}`);
  }
  const batch = v.num('OTEL_BSP_MAX_EXPORT_BATCH_SIZE');
  const queue = v.num('OTEL_BSP_MAX_QUEUE_SIZE');
  if (batch > queue)
    v.problems.push(
      `OTEL_BSP_MAX_EXPORT_BATCH_SIZE: expected at most OTEL_BSP_MAX_QUEUE_SIZE (${queue}), got ${batch}`,
    );

  const base = v.optStr('OTEL_EXPORTER_OTLP_ENDPOINT');
  const full = v.optStr('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const disabled = v.values.get('OTEL_SDK_DISABLED') === true || v.str('OTEL_TRACES_EXPORTER') === 'none';
  if (disabled || (base === undefined && full === undefined)) return undefined;
  return {
    url: full ?? `${base!.replace(/\/+$/, '')}/v1/traces`,
    headers: parsed.OTEL_EXPORTER_OTLP_TRACES_HEADERS ?? parsed.OTEL_EXPORTER_OTLP_HEADERS ?? {},
    exportTimeoutMs: v.num('OTEL_EXPORTER_OTLP_TIMEOUT'),
    serviceName: v.str('OTEL_SERVICE_NAME'),
    resourceAttributes: parsed.OTEL_RESOURCE_ATTRIBUTES ?? {},
    sampler: v.str('OTEL_TRACES_SAMPLER') as TracingConfig['sampler'],
    samplerRatio: ratio,
    scheduleDelayMs: v.num('OTEL_BSP_SCHEDULE_DELAY'),
    batchTimeoutMs: v.num('OTEL_BSP_EXPORT_TIMEOUT'),
    maxQueueSize: queue,
    maxExportBatchSize: batch,
    recordPrincipal: v.values.get('ARKVORY_TRACE_PRINCIPAL') === true,
  };
}

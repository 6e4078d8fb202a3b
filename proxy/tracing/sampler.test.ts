import { type Context, ROOT_CONTEXT, SpanKind, trace, TraceFlags } from '@opentelemetry/api';
import { SamplingDecision, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace';
import { expect, it } from 'vitest';
import { createSampler, untrustedParent } from './sampler.ts';

/** A trace id a client may pick: TraceIdRatioBased keeps it at any ratio above 0 (its four words XOR to 0). */
const PASSING_ID = '10000000100000000000000000000000';
const SPAN_ID = '00f067aa0ba902b7';

function remote(traceId: string, sampled: boolean): Context {
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId,
    spanId: SPAN_ID,
    traceFlags: sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
    isRemote: true,
  });
}

function decide(sampler: ReturnType<typeof createSampler>, context: Context, traceId: string): boolean {
  return (
    sampler.shouldSample(context, traceId, 'GET', SpanKind.SERVER, {}, []).decision ===
    SamplingDecision.RECORD_AND_SAMPLED
  );
}

it('the trace id chosen here passes any ratio above 0 when read as TraceIdRatioBased reads it', () => {
  expect(new TraceIdRatioBasedSampler(1e-9).shouldSample(ROOT_CONTEXT, PASSING_ID).decision).toBe(
    SamplingDecision.RECORD_AND_SAMPLED,
  );
});

it("an untrusted peer's sampled flag is not followed: a 0 ratio samples none of its requests", () => {
  const sampler = createSampler('parentbased_traceidratio', 0, () => 0);
  expect(decide(sampler, untrustedParent(remote(PASSING_ID, true)), PASSING_ID)).toBe(false);
});

it("an untrusted peer's trace id does not steer the ratio: a random draw decides, whatever the flag", () => {
  for (const name of ['parentbased_traceidratio', 'traceidratio'] as const) {
    let draw = 0.9;
    const sampler = createSampler(name, 0.5, () => draw);
    // An id the ratio would pass, flagged sampled: the draw (0.9 past 0.5) says no.
    expect(decide(sampler, untrustedParent(remote(PASSING_ID, true)), PASSING_ID)).toBe(false);
    // A draw under the ratio samples it, even flagged unsampled: the operator's decision, not the client's.
    draw = 0.1;
    expect(decide(sampler, untrustedParent(remote(PASSING_ID, false)), PASSING_ID)).toBe(true);
  }
});

it("an untrusted peer's request is decided as a new trace by the always_* samplers", () => {
  const parent = untrustedParent(remote(PASSING_ID, false));
  expect(decide(createSampler('parentbased_always_on', 1), parent, PASSING_ID)).toBe(true);
  expect(decide(createSampler('always_on', 1), parent, PASSING_ID)).toBe(true);
  expect(
    decide(createSampler('parentbased_always_off', 1), untrustedParent(remote(PASSING_ID, true)), PASSING_ID),
  ).toBe(false);
});

it("a trusted proxy's sampled flag is followed, as the parent-based samplers do", () => {
  const sampler = createSampler('parentbased_traceidratio', 0, () => 0);
  expect(decide(sampler, remote(PASSING_ID, true), PASSING_ID)).toBe(true);
  expect(
    decide(
      createSampler('parentbased_traceidratio', 1, () => 0),
      remote(PASSING_ID, false),
      PASSING_ID,
    ),
  ).toBe(false);
});

it("the request's own spans under an untrusted parent follow the server span, not the client's trace id", () => {
  const sampler = createSampler('traceidratio', 0.5, () => 0.9);
  const under = (sampled: boolean) =>
    trace.setSpanContext(untrustedParent(remote(PASSING_ID, true)), {
      traceId: PASSING_ID,
      spanId: 'a1b2c3d4e5f60718',
      traceFlags: sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
      isRemote: false,
    });
  expect(decide(sampler, under(false), PASSING_ID)).toBe(false);
  expect(decide(sampler, under(true), PASSING_ID)).toBe(true);
});

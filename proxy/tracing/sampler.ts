/**
 * The sampler OTEL_TRACES_SAMPLER names (the OTel spec's values), built from the parsed config, and
 * what it makes of a parent context from a peer the process does not trust (docs/tracing.md): that
 * context keeps its trace id, but its sampled flag is not followed, and neither is the trace id
 * read for a ratio (the client chose it, and could choose ids that always pass). The request is
 * decided as a new trace would be, a ratio drawn at random: no client steers which requests are
 * sampled, so none can make every one of its requests cost a sampled request's price or fill the
 * span queue that every other request's spans wait in.
 */
import { type Context, createContextKey, trace, TraceFlags } from '@opentelemetry/api';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  type Sampler,
  SamplingDecision,
  type SamplingResult,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace';
import type { TracingConfig } from '../config/config.ts';

/** Set on a request's parent context when the peer that sent it is not trusted with sampling. */
const UNTRUSTED_PARENT = createContextKey('arkvory.untrusted_parent');

/** `parent` (a remote span context the propagator read) with its sampled flag not to be followed. */
export function untrustedParent(parent: Context): Context {
  return parent.setValue(UNTRUSTED_PARENT, true);
}

/** Samples `ratio` of what it is asked, by a random draw: nothing of the request sways it. */
class RandomRatioSampler implements Sampler {
  readonly #ratio: number;
  readonly #random: () => number;

  constructor(ratio: number, random: () => number) {
    this.#ratio = ratio;
    this.#random = random;
  }

  shouldSample(): SamplingResult {
    return {
      decision: this.#random() < this.#ratio ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD,
    };
  }

  toString(): string {
    return `RandomRatio{${this.#ratio}}`;
  }
}

const SAMPLED: SamplingResult = { decision: SamplingDecision.RECORD_AND_SAMPLED };
const NOT_SAMPLED: SamplingResult = { decision: SamplingDecision.NOT_RECORD };

/**
 * The operator's sampler, except under an untrusted parent: there the server span is decided by
 * `untrusted` (the operator's root decision, not steered by the request), and the request's own
 * spans below it (their parent is local) follow the server span, whatever the sampler would read
 * in the client's trace id.
 */
class PeerAwareSampler implements Sampler {
  readonly #operator: Sampler;
  readonly #untrusted: Sampler;

  constructor(operator: Sampler, untrusted: Sampler) {
    this.#operator = operator;
    this.#untrusted = untrusted;
  }

  shouldSample(...args: Parameters<Sampler['shouldSample']>): SamplingResult {
    const [context] = args;
    const parent = trace.getSpanContext(context);
    if (parent === undefined || context.getValue(UNTRUSTED_PARENT) !== true)
      return this.#operator.shouldSample(...args);
    if (parent.isRemote) return this.#untrusted.shouldSample(...args);
    return (parent.traceFlags & TraceFlags.SAMPLED) !== 0 ? SAMPLED : NOT_SAMPLED;
  }

  toString(): string {
    return `PeerAware{operator=${this.#operator.toString()}, untrusted=${this.#untrusted.toString()}}`;
  }
}

/** The OTel spec's sampler `name`, and the root decision it makes where the request may not sway it. */
function samplersOf(name: TracingConfig['sampler'], ratio: number, random: () => number): [Sampler, Sampler] {
  switch (name) {
    case 'always_on':
      return [new AlwaysOnSampler(), new AlwaysOnSampler()];
    case 'always_off':
      return [new AlwaysOffSampler(), new AlwaysOffSampler()];
    case 'traceidratio':
      return [new TraceIdRatioBasedSampler(ratio), new RandomRatioSampler(ratio, random)];
    case 'parentbased_always_on':
      return [new ParentBasedSampler({ root: new AlwaysOnSampler() }), new AlwaysOnSampler()];
    case 'parentbased_always_off':
      return [new ParentBasedSampler({ root: new AlwaysOffSampler() }), new AlwaysOffSampler()];
    case 'parentbased_traceidratio':
      return [
        new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) }),
        new RandomRatioSampler(ratio, random),
      ];
  }
}

/** `random`: the draw for an untrusted parent's ratio, in [0, 1); injected by tests. */
export function createSampler(name: TracingConfig['sampler'], ratio: number, random = Math.random): Sampler {
  const [operator, untrusted] = samplersOf(name, ratio, random);
  return new PeerAwareSampler(operator, untrusted);
}

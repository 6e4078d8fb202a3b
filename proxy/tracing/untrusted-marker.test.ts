import { expect, it } from 'vitest';
import { markUntrusted, relayedTraceContext } from './untrusted-marker.ts';

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

it('the marker goes first, a client-sent `arkvory` member is taken out, the other members kept in order', () => {
  expect(markUntrusted(undefined)).toBe('arkvory=untrusted');
  expect(markUntrusted('')).toBe('arkvory=untrusted');
  expect(markUntrusted('congo=t61rcWkgMzE, arkvory=trusted ,rojo=00f067aa0ba902b7,arkvory = x')).toBe(
    'arkvory=untrusted,congo=t61rcWkgMzE,rojo=00f067aa0ba902b7',
  );
  // Two header lines, as node:http may hand them over.
  expect(markUntrusted(['a=1', 'arkvory=untrusted, b=2'])).toBe('arkvory=untrusted,a=1,b=2');
  // A key that merely starts with the product's name is another vendor's.
  expect(markUntrusted('arkvory2=x,acme@arkvory=y')).toBe('arkvory=untrusted,arkvory2=x,acme@arkvory=y');
});

it('at most 32 members: the marker is kept, the last members are dropped', () => {
  const many = Array.from({ length: 40 }, (_, i) => `k${i}=v`).join(',');
  const members = markUntrusted(many).split(',');
  expect(members).toHaveLength(32);
  expect(members[0]).toBe('arkvory=untrusted');
  expect(members.at(-1)).toBe('k30=v');
});

it('a router with tracing off: nothing to pass, stripped, as it came from a trusted peer, marked from anyone else', () => {
  const any = () => true;
  const trusts = (address: string) => address === '10.0.0.1';
  const client = { traceparent: TRACEPARENT, tracestate: 'client=chosen,arkvory=trusted' };
  // No trace context sent: the head is left as it is.
  expect(relayedTraceContext({}, '192.0.2.7', any, trusts)).toBeUndefined();
  // A peer the router would not continue (ARKVORY_TRACE_CONTEXT_FROM): nothing goes on.
  expect(relayedTraceContext(client, '192.0.2.7', () => false, trusts)).toEqual([]);
  expect(relayedTraceContext({ tracestate: 'a=1' }, '192.0.2.7', () => false, trusts)).toEqual([]);
  // A trusted proxy's context (a marker of a router in front included) goes on as it came.
  expect(relayedTraceContext(client, '10.0.0.1', any, trusts)).toBeUndefined();
  // Anyone else's: its trace id kept, marked untrusted, its own marker gone.
  expect(relayedTraceContext(client, '192.0.2.7', any, trusts)).toEqual([
    'traceparent',
    TRACEPARENT,
    'tracestate',
    'arkvory=untrusted,client=chosen',
  ]);
  expect(relayedTraceContext({ traceparent: TRACEPARENT }, undefined, any, trusts)).toEqual([
    'traceparent',
    TRACEPARENT,
    'tracestate',
    'arkvory=untrusted',
  ]);
});

import { describe, expect, it } from 'vitest';
import { decideReload, type PairCheck, type ServedCertificate, splitPemChain } from './certificate-pair.ts';

const served: ServedCertificate = {
  serial: 'AA',
  subject: 'CN=a',
  notBeforeMs: 0,
  notAfterMs: 10,
  fingerprint256: 'F1',
  chainLength: 2,
};
const same: PairCheck = { ok: true, certificate: served };
const other: PairCheck = { ok: true, certificate: { ...served, serial: 'BB', fingerprint256: 'F2' } };
const broken: PairCheck = { ok: false, reason: 'the private key does not match the certificate' };

describe('decideReload', () => {
  it.each([
    ['the served pair read again', served, same, false, { action: 'unchanged' }],
    ['the served leaf with a new client CA', served, same, true, { action: 'swap', certificate: served }],
    ['a new valid pair', served, other, false, { action: 'swap', certificate: other.ok && other.certificate }],
    ['a broken pair', served, broken, false, { action: 'reject', reason: broken.ok ? '' : broken.reason }],
    [
      'a broken pair with a new client CA',
      served,
      broken,
      true,
      { action: 'reject', reason: broken.ok ? '' : broken.reason },
    ],
    ['nothing served yet', undefined, same, false, { action: 'swap', certificate: served }],
  ] as const)('%s', (_name, current, candidate, caChanged, expected) =>
    expect(decideReload(current, candidate, caChanged)).toEqual(expected),
  );
});

describe('splitPemChain', () => {
  const block = (body: string) => `-----BEGIN CERTIFICATE-----\n${body}\n-----END CERTIFICATE-----`;
  it.each([
    ['', []],
    ['no pem here', []],
    [`${block('AAA')}\n${block('BBB')}\n`, [block('AAA'), block('BBB')]],
    [`junk\n${block('AAA')}\ntrailing`, [block('AAA')]],
  ])('%j', (pem, expected) => expect(splitPemChain(pem)).toEqual(expected));
});

import { describe, expect, it } from 'vitest';
import { decideReload, type PartCheck, type ServedCertificate, splitPemChain } from './certificate-pair.ts';

const leaf: ServedCertificate = { serial: 'BB', subject: 'CN=a', notBeforeMs: 0, notAfterMs: 10, chainLength: 2 };
const same = { state: 'same' } as const;
const newPair: PartCheck<ServedCertificate> = { state: 'new', value: leaf };
const newCa: PartCheck<unknown> = { state: 'new', value: 'pem' };
const brokenPair = { state: 'broken', reason: 'the private key does not match the certificate' } as const;
const brokenCa = { state: 'broken', reason: 'ARKVORY_TLS_CLIENT_CA_FILE /ca.pem: holds no PEM certificate' } as const;

describe('decideReload', () => {
  it.each([
    ['both read again unchanged', same, same, { action: 'unchanged' }],
    ['a new valid pair', newPair, same, { action: 'swap', certificate: leaf, clientCa: false, failures: [] }],
    ['a new client CA alone', same, newCa, { action: 'swap', certificate: undefined, clientCa: true, failures: [] }],
    ['both new', newPair, newCa, { action: 'swap', certificate: leaf, clientCa: true, failures: [] }],
    ['a broken pair', brokenPair, same, { action: 'reject', failures: [brokenPair.reason] }],
    ['a broken client CA', same, brokenCa, { action: 'reject', failures: [brokenCa.reason] }],
    ['both broken', brokenPair, brokenCa, { action: 'reject', failures: [brokenPair.reason, brokenCa.reason] }],
    [
      'a broken pair does not hold back a new client CA',
      brokenPair,
      newCa,
      { action: 'swap', certificate: undefined, clientCa: true, failures: [brokenPair.reason] },
    ],
    [
      'a broken client CA does not hold back a new pair',
      newPair,
      brokenCa,
      { action: 'swap', certificate: leaf, clientCa: false, failures: [brokenCa.reason] },
    ],
  ] as const)('%s', (_name, pair, clientCa, expected) => expect(decideReload(pair, clientCa)).toEqual(expected));
});

describe('splitPemChain', () => {
  const block = (body: string) => `-----BEGIN CERTIFICATE-----\n${body}\n-----END CERTIFICATE-----`;
  it.each([
    ['', []],
    ['no pem here', []],
    [`${block('AAA')}\n${block('BBB')}\n`, [block('AAA'), block('BBB')]],
    [`junk\n${block('AAA')}\ntrailing`, [block('AAA')]],
    // A block runs to the first END after its BEGIN; a BEGIN with no END after it is no block.
    [`-----BEGIN CERTIFICATE-----\nAAA\n${block('BBB')}`, [`-----BEGIN CERTIFICATE-----\nAAA\n${block('BBB')}`]],
    [`${block('AAA')}\n-----BEGIN CERTIFICATE-----\nBBB\n`, [block('AAA')]],
    ['-----BEGIN CERTIFICATE----------END CERTIFICATE-----', []],
    [
      `-----BEGIN CERTIFICATE----------END CERTIFICATE-----x${block('A')}`,
      [`-----BEGIN CERTIFICATE----------END CERTIFICATE-----x${block('A')}`],
    ],
  ])('%j', (pem, expected) => expect(splitPemChain(pem)).toEqual(expected));

  it('reads 2 MB of BEGIN lines with no END in linear time (a reload runs on the event loop)', () => {
    // The lazy regex it replaced scanned to the end of the text from every BEGIN: about 40 s here.
    const garbage = '-----BEGIN CERTIFICATE-----\nAAAA\n'.repeat(64_000);
    const started = performance.now();
    expect(splitPemChain(`${block('AAA')}\n${garbage}`)).toEqual([block('AAA')]);
    expect(performance.now() - started).toBeLessThan(2000);
  });
});

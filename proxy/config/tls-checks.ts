/** Cross-variable checks of the TLS variables, and the TLS slice of the Config they produce. */
import path from 'node:path';
import type { Config } from './types.ts';
import type { VariableValues } from './variable-values.ts';
import { requirementOf } from '../../lib/pg-client.ts';
import { parseHsts } from '../tls/hsts.ts';

/** The listener's certificate and client-certificate settings, or undefined for plain HTTP. */
export function checkTls(v: VariableValues, cwd: string): Config['tls'] {
  const cert = v.optStr('ARKVORY_TLS_CERT_FILE');
  const key = v.optStr('ARKVORY_TLS_KEY_FILE');
  const clientCa = v.optStr('ARKVORY_TLS_CLIENT_CA_FILE');
  if ((cert === undefined) !== (key === undefined)) {
    v.problems.push(
      cert === undefined
        ? 'ARKVORY_TLS_KEY_FILE: set without ARKVORY_TLS_CERT_FILE; give both (or neither, for plain HTTP)'
        : 'ARKVORY_TLS_CERT_FILE: set without ARKVORY_TLS_KEY_FILE; give both (or neither, for plain HTTP)',
    );
    return undefined;
  }
  if (clientCa !== undefined && cert === undefined) {
    v.problems.push(
      'ARKVORY_TLS_CLIENT_CA_FILE: client certificates need TLS; set ARKVORY_TLS_CERT_FILE and ARKVORY_TLS_KEY_FILE',
    );
    return undefined;
  }
  if (clientCa !== undefined && v.str('ARKVORY_ROLE') === 'router') {
    v.problems.push(
      'ARKVORY_TLS_CLIENT_CA_FILE: the router does not authenticate; client certificates are checked by the gateways (docs/tls.md)',
    );
    return undefined;
  }
  if (v.env.ARKVORY_TLS_CLIENT_CERT !== undefined && v.env.ARKVORY_TLS_CLIENT_CERT !== '' && clientCa === undefined)
    v.problems.push(
      'ARKVORY_TLS_CLIENT_CERT: needs ARKVORY_TLS_CLIENT_CA_FILE (the CAs client certificates are verified against)',
    );
  const hsts = checkHsts(v, cert !== undefined && key !== undefined);
  if (cert === undefined || key === undefined) return undefined;
  return {
    certFile: path.resolve(cwd, cert),
    keyFile: path.resolve(cwd, key),
    clientCaFile: clientCa === undefined ? undefined : path.resolve(cwd, clientCa),
    clientCert: clientCa === undefined ? 'off' : (v.str('ARKVORY_TLS_CLIENT_CERT') as 'optional' | 'require'),
    hsts,
  };
}

/**
 * The Strict-Transport-Security value of ARKVORY_TLS_HSTS in its canonical form, or undefined (unset,
 * or refused: the problem is pushed). Only with TLS: RFC 6797 §7.2 forbids it over plain HTTP.
 */
function checkHsts(v: VariableValues, tls: boolean): string | undefined {
  const value = v.optStr('ARKVORY_TLS_HSTS');
  if (value === undefined) return undefined;
  if (!tls) {
    v.problems.push(
      'ARKVORY_TLS_HSTS: Strict-Transport-Security is sent over TLS only (RFC 6797 §7.2); set ARKVORY_TLS_CERT_FILE and ARKVORY_TLS_KEY_FILE, or set the header on the TLS proxy in front',
    );
    return undefined;
  }
  const parsed = parseHsts(value);
  if ('problem' in parsed) {
    v.problems.push(
      `ARKVORY_TLS_HSTS: ${parsed.problem}; expected e.g. "max-age=31536000; includeSubDomains", got ${JSON.stringify(value)}`,
    );
    return undefined;
  }
  return parsed.header;
}

/**
 * Refuses an `ARKVORY_DATABASE_URL` whose TLS settings turn certificate verification off:
 * node-postgres reads `sslmode=no-verify`, `ssl=no-verify`, PGSSLMODE=no-verify (and, with
 * `uselibpqcompat=true`, libpq's `require`, `prefer` and `verify-ca`) as "encrypt, but believe any
 * certificate", which no Arkvory setting may do (docs/tls.md). `verify-full`, or `sslrootcert=`
 * naming a private CA, verifies.
 */
export function checkDatabaseTls(v: VariableValues): void {
  if (v.failed.has('ARKVORY_DATABASE_URL')) return;
  const url = v.optStr('ARKVORY_DATABASE_URL');
  if (url === undefined) return;
  const params = new URL(url).searchParams;
  const problem = unverifiedDatabaseTls(params);
  if (problem) v.problems.push(`ARKVORY_DATABASE_URL: ${problem}`);
  const fromEnvironment = unverifiedEnvironmentTls(params, v.env.PGSSLMODE);
  if (fromEnvironment) v.problems.push(fromEnvironment);
  try {
    requirementOf(url);
  } catch (err) {
    v.problems.push(`ARKVORY_DATABASE_URL: ${(err as Error).message}`);
  }
}

const VERIFY_INSTEAD =
  'use sslmode=verify-full (with the CA in ARKVORY_TLS_CA_FILE or sslrootcert=), or sslmode=disable for a connection in clear';

/**
 * Why these connection-URL parameters leave the server's certificate unverified, or undefined. Pure.
 * node-postgres takes a parameter's last value: every value is judged, so no URL passes here that
 * node-postgres reads otherwise.
 */
export function unverifiedDatabaseTls(params: URLSearchParams): string | undefined {
  const libpq = params.getAll('uselibpqcompat').includes('true');
  const mode = params
    .getAll('sslmode')
    .find((m) => m === 'no-verify' || (libpq && ['require', 'prefer', 'verify-ca'].includes(m)));
  if (mode !== undefined)
    return `sslmode=${mode}${libpq ? ' with uselibpqcompat=true' : ''} does not verify the server's certificate; ${VERIFY_INSTEAD}`;
  // node-postgres reads `ssl=no-verify` as that sslmode.
  if (params.getAll('ssl').includes('no-verify'))
    return `ssl=no-verify does not verify the server's certificate; ${VERIFY_INSTEAD}`;
  return undefined;
}

/**
 * PGSSLMODE=no-verify in the environment, which node-postgres reads when the URL names no `sslmode`
 * or `ssl` (its other TLS parameters may decide first; refused all the same). Pure.
 */
export function unverifiedEnvironmentTls(params: URLSearchParams, pgSslMode: string | undefined): string | undefined {
  if (pgSslMode !== 'no-verify') return undefined;
  if (['sslmode', 'ssl'].some((name) => params.getAll(name).some((value) => value !== ''))) return undefined;
  return "PGSSLMODE: no-verify does not verify the server's certificate of ARKVORY_DATABASE_URL, which sets no sslmode; unset it, or put sslmode=verify-full (or sslmode=disable for a connection in clear) in the URL";
}

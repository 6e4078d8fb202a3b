/** Cross-variable checks of the TLS variables, and the TLS slice of the Config they produce. */
import path from 'node:path';
import type { Config } from './types.ts';
import type { VariableValues } from './variable-values.ts';

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
  if (cert === undefined || key === undefined) return undefined;
  return {
    certFile: path.resolve(cwd, cert),
    keyFile: path.resolve(cwd, key),
    clientCaFile: clientCa === undefined ? undefined : path.resolve(cwd, clientCa),
    clientCert: clientCa === undefined ? 'off' : (v.str('ARKVORY_TLS_CLIENT_CERT') as 'optional' | 'require'),
  };
}

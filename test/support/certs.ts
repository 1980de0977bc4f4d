/**
 * Throwaway certificates for the mTLS tests, made with openssl in a temporary folder: a CA, the
 * server's certificate (localhost and 127.0.0.1; server and internode client alike) and a client's.
 * Valid for a day; nothing of them is kept.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';

export interface TestCerts {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** A second CA's client certificate: well formed, but not one the server trusts. */
  strangerCert: string;
  strangerKey: string;
}

const openssl = (args: string[]): void => void execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function makeCa(dir: string, name: string): { cert: string; key: string } {
  const cert = path.join(dir, `${name}.pem`);
  const key = path.join(dir, `${name}.key`);
  openssl(['req', '-x509', ...EC, '-keyout', key, '-out', cert, '-days', '1', '-subj', `/CN=order-saga test ${name}`]);
  return { cert, key };
}

function sign(
  dir: string,
  name: string,
  ca: { cert: string; key: string },
  ext: string,
): { cert: string; key: string } {
  const cert = path.join(dir, `${name}.pem`);
  const key = path.join(dir, `${name}.key`);
  const csr = path.join(dir, `${name}.csr`);
  const extFile = path.join(dir, `${name}.ext`);
  writeFileSync(extFile, ext);
  openssl(['req', ...EC, '-keyout', key, '-out', csr, '-subj', `/CN=${name}`]);
  openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAcreateserial',
    '-out',
    cert,
    '-days',
    '1',
    '-extfile',
    extFile,
  ]);
  return { cert, key };
}

export function makeTestCerts(dir: string): TestCerts {
  const ca = makeCa(dir, 'ca');
  const server = sign(
    dir,
    'localhost',
    ca,
    'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n',
  );
  const client = sign(
    dir,
    'order-saga-client',
    ca,
    'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n',
  );
  const other = makeCa(dir, 'other-ca');
  const stranger = sign(dir, 'stranger', other, 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n');
  return {
    ca: ca.cert,
    serverCert: server.cert,
    serverKey: server.key,
    clientCert: client.cert,
    clientKey: client.key,
    strangerCert: stranger.cert,
    strangerKey: stranger.key,
  };
}

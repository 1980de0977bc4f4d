/**
 * The Temporal connection profile (ops/temporal-connection.ts) without a server: plain address and
 * namespace as before; a profile file's TLS and API key; each unusable profile refused naming the
 * setting, by the loader, by client.ts (exit 2) and by the worker (before it connects); and an API key
 * or a key's content never in a message, a summary or a serialized configuration.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { addSearchAttributesCommands } from '../ops/cluster-check';
import { readConfig } from '../ops/config';
import { loadTemporalProfile, SHAREABLE_PROFILE_VARIABLES, TemporalProfileError } from '../ops/temporal-connection';
import { runProcess } from '../platform/processes';
import { makeTestCerts } from './support/certs';

const ROOT = path.resolve(__dirname, '..');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-profile-'));
const certs = makeTestCerts(tmp);
const SECRET = 'api-key-that-must-never-be-printed';
const LOCAL = '127.0.0.1:7233';
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const p = path.join(tmp, name);
  writeFileSync(p, text);
  return p;
}

const good = file(
  'temporal.toml',
  `[profile.cloud]
address = "my-ns.a1b2c.tmprl.cloud:7233"
namespace = "my-ns.a1b2c"
api_key = "${SECRET}"

[profile.mtls]
address = "temporal.internal:7233"
namespace = "orders"
[profile.mtls.tls]
server_name = "localhost"
server_ca_cert_path = "${certs.ca}"
client_cert_path = "${certs.clientCert}"
client_key_path = "${certs.clientKey}"
[profile.mtls.codec]
endpoint = "http://127.0.0.1:8234/token"
`,
);

/** The message of what `fn` throws. */
function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(TemporalProfileError);
    return (err as Error).message;
  }
  throw new Error('not refused');
}

describe('the connection profile', () => {
  it('without any: the loopback server, as before; TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE as before', () => {
    const local = loadTemporalProfile({}, LOCAL);
    expect(local).toMatchObject({ address: LOCAL, namespace: 'default', external: false });
    expect(local.connection).toEqual({ address: LOCAL });
    const plain = readConfig({ TEMPORAL_ADDRESS: '10.0.0.5:7233', TEMPORAL_NAMESPACE: 'shop' });
    expect(plain).toMatchObject({ temporalAddress: '10.0.0.5:7233', namespace: 'shop' });
    expect(plain.temporal).toMatchObject({ external: true, summary: '10.0.0.5:7233 (namespace shop, no TLS)' });
    expect(plain.temporal.connection).toEqual({ address: '10.0.0.5:7233' });
  });

  it('a profile of the file: address, namespace, TLS with a client certificate, API key; the variables override it', () => {
    const mtls = loadTemporalProfile({ TEMPORAL_CONFIG_FILE: good, TEMPORAL_PROFILE: 'mtls' }, LOCAL);
    expect(mtls).toMatchObject({ address: 'temporal.internal:7233', namespace: 'orders', external: true });
    expect(mtls.summary).toContain('TLS with a client certificate');
    const tls = mtls.connection.tls as { clientCertPair?: { crt: Uint8Array }; serverNameOverride?: string };
    expect(tls.serverNameOverride).toBe('localhost');
    expect(Buffer.from(tls.clientCertPair!.crt).toString()).toContain('BEGIN CERTIFICATE');

    const cloud = loadTemporalProfile(
      { TEMPORAL_CONFIG_FILE: good, TEMPORAL_PROFILE: 'cloud', TEMPORAL_NAMESPACE: 'other' },
      LOCAL,
    );
    expect(cloud).toMatchObject({ namespace: 'other', external: true });
    expect(cloud.connection).toMatchObject({ apiKey: SECRET, tls: true }); // an API key implies TLS
    expect(cloud.summary).toContain('API key');
    // Never the key itself: not in the summary, nor in the configuration printed or serialized.
    const cfg = readConfig({ TEMPORAL_CONFIG_FILE: good, TEMPORAL_PROFILE: 'cloud' });
    for (const shown of [cloud.summary, JSON.stringify(cloud), JSON.stringify(cfg), inspect(cfg, { depth: 9 })])
      expect(shown).not.toContain(SECRET);
    expect(SHAREABLE_PROFILE_VARIABLES.filter((v) => /API_KEY|_DATA/.test(v))).toEqual([]);
  });

  it('refuses an unusable profile, naming the setting, and quotes no line of the file', () => {
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: path.join(tmp, 'missing.toml') }, LOCAL))).toMatch(
      /^TEMPORAL_CONFIG_FILE: cannot read .*missing\.toml \(ENOENT\)/,
    );
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: good, TEMPORAL_PROFILE: 'prod' }, LOCAL))).toBe(
      `TEMPORAL_PROFILE: no profile "prod" in ${good}; it has "cloud", "mtls"`,
    );
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_PROFILE: 'prod' }, LOCAL))).toMatch(
      /^TEMPORAL_PROFILE: no profile "prod"/,
    );
    // A file named on purpose without a default profile, and no TEMPORAL_PROFILE: not silently local.
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: good }, LOCAL))).toMatch(/no profile "default"/);
    const broken = file('broken.toml', `[profile.default]\napi_key = "${SECRET}\naddress = "x:1"\n`);
    const tomlError = refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: broken }, LOCAL));
    expect(tomlError).toMatch(/broken\.toml: not valid TOML \(line \d+, column \d+\)$/);
    expect(tomlError).not.toContain(SECRET);
    const typo = file(
      'typo.toml',
      `[profile.default]\naddress = "x:1"\n[profile.default.tls]\nclient_cert = "c.pem"\n`,
    );
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: typo }, LOCAL))).toMatch(
      /unrecognized in profile\.default\.tls: client_cert/,
    );
    const noVerify = file(
      'noverify.toml',
      `[profile.default]\naddress = "x:1"\n[profile.default.tls]\ndisable_host_verification = true\n`,
    );
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: noVerify }, LOCAL))).toMatch(
      /noverify\.toml: tls\.disable_host_verification is not supported by the TypeScript SDK/,
    );
    const noCert = file(
      'nocert.toml',
      `[profile.default]\naddress = "x:1"\n[profile.default.tls]\nclient_cert_path = "${tmp}/none.pem"\nclient_key_path = "${certs.clientKey}"\n`,
    );
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_CONFIG_FILE: noCert }, LOCAL))).toMatch(
      /^tls\.client_cert_path of profile "default" in .*nocert\.toml: cannot read .*none\.pem \(ENOENT\)/,
    );
    expect(
      refusal(() =>
        loadTemporalProfile(
          { TEMPORAL_TLS_CLIENT_CERT_PATH: certs.clientKey, TEMPORAL_TLS_CLIENT_KEY_PATH: certs.clientKey },
          LOCAL,
        ),
      ),
    ).toMatch(/^TEMPORAL_TLS_CLIENT_CERT_PATH: .* is not a PEM certificate$/);
    expect(refusal(() => loadTemporalProfile({ TEMPORAL_TLS_CLIENT_CERT_PATH: certs.clientCert }, LOCAL))).toMatch(
      /needs its key .*client_key_path \(TEMPORAL_TLS_CLIENT_KEY_PATH\) is missing/,
    );
  });

  it('client.ts refuses it as invalid input (exit 2) and the worker before it connects, naming the setting', async () => {
    const env = {
      TEMPORAL_CONFIG_FILE: good,
      TEMPORAL_PROFILE: 'prod',
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
    };
    const client = await runProcess(
      process.execPath,
      [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), 'status', 'o-1'],
      env,
    );
    expect(client.code).toBe(2);
    expect(client.stderr.trim()).toBe(
      `invalid input: TEMPORAL_PROFILE: no profile "prod" in ${good}; it has "cloud", "mtls"`,
    );
    const worker = await runProcess(process.execPath, [require.resolve('tsx/cli'), path.join(ROOT, 'worker.ts')], {
      ...env,
      TEMPORAL_PROFILE: 'cloud',
      TEMPORAL_API_KEY: SECRET,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: path.join(tmp, 'no-ca.pem'),
    });
    expect(worker.code).toBe(1);
    expect(worker.stderr.trim()).toMatch(
      /^worker: TEMPORAL_TLS_SERVER_CA_CERT_PATH: cannot read .*no-ca\.pem \(ENOENT\)$/,
    );
    expect(worker.stdout + worker.stderr).not.toContain(SECRET);
  });

  it('names the commands that add the search attributes on a cluster this client may not change', () => {
    expect(addSearchAttributesCommands('shop', ['OrderStatus', 'NeedsAttention'])).toEqual([
      'temporal operator search-attribute create --namespace shop --name OrderStatus --type Keyword --name NeedsAttention --type Bool',
      'tcld namespace search-attributes add --namespace shop --search-attribute "OrderStatus=Keyword" --search-attribute "NeedsAttention=Bool"',
    ]);
  });
});

/**
 * The one way every process finds and reaches Temporal: a connection profile of the SDK's
 * `@temporalio/envconfig` (the `TEMPORAL_*` variables over a profile of `temporal.toml`, the file and
 * profiles the Temporal CLI reads with `--profile`). Nothing given: the loopback server of npm start.
 * A profile that cannot be used is refused here, naming the setting, before a process starts anything;
 * an API key or a key file's content never goes into a message.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  loadClientConfig,
  loadClientConfigProfile,
  toClientOptions,
  type ClientConfigProfile,
} from '@temporalio/envconfig';

/** What Connection.connect (client) and NativeConnection.connect (worker) both take. */
export interface ConnectionSettings {
  address: string;
  tls?: ReturnType<typeof toClientOptions>['connectionOptions']['tls'];
  apiKey?: string;
  metadata?: Record<string, string>;
}

export interface TemporalProfile {
  address: string;
  namespace: string;
  /** True when a profile or TEMPORAL_ADDRESS names the server: npm start then runs none of its own. */
  external: boolean;
  /** The profile's name and file, when one was read. */
  profile?: { name: string; file: string };
  /** For logs and errors: address, namespace, profile, TLS, client certificate, API key (never its value). */
  summary: string;
  /**
   * The connection's settings, secrets included. Not enumerable: a configuration printed or
   * serialized (JSON.stringify, console.dir) does not carry the API key or the key.
   */
  readonly connection: ConnectionSettings;
}

/** A profile that cannot be used: the message names the setting. */
export class TemporalProfileError extends Error {}

/**
 * The variables that carry no secret: what npm start records for client.ts in another shell. The API
 * key and the *_DATA variables (certificate and key content) are never written anywhere.
 */
export const SHAREABLE_PROFILE_VARIABLES = [
  'TEMPORAL_CONFIG_FILE',
  'TEMPORAL_PROFILE',
  'TEMPORAL_TLS',
  'TEMPORAL_TLS_CLIENT_CERT_PATH',
  'TEMPORAL_TLS_CLIENT_KEY_PATH',
  'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
  'TEMPORAL_TLS_SERVER_NAME',
] as const;

/** envconfig's own lookup of the default file (Linux and macOS; Windows: %APPDATA%). */
function defaultConfigFile(env: Record<string, string>): string | undefined {
  if (process.platform === 'win32') return env.APPDATA && path.join(env.APPDATA, 'temporalio', 'temporal.toml');
  if (process.platform === 'darwin')
    return env.HOME && path.join(env.HOME, 'Library', 'Application Support', 'temporalio', 'temporal.toml');
  const dir = env.XDG_CONFIG_HOME ?? (env.HOME && path.join(env.HOME, '.config'));
  return dir && path.isAbsolute(dir) ? path.join(dir, 'temporalio', 'temporal.toml') : undefined;
}

const home = (p: string): string => (p.startsWith(os.homedir() + path.sep) ? `~${p.slice(os.homedir().length)}` : p);

/** The TLS files of a profile: the setting's name in the file and in the environment. */
const TLS_FILES = [
  { key: 'clientCert', toml: 'client_cert_path', env: 'TEMPORAL_TLS_CLIENT_CERT_PATH', pem: 'CERTIFICATE' },
  { key: 'clientKey', toml: 'client_key_path', env: 'TEMPORAL_TLS_CLIENT_KEY_PATH', pem: 'PRIVATE KEY' },
  { key: 'serverCACert', toml: 'server_ca_cert_path', env: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', pem: 'CERTIFICATE' },
] as const;

/**
 * Loads the connection profile from `env`: TEMPORAL_CONFIG_FILE (else the default temporal.toml,
 * when it exists), TEMPORAL_PROFILE (else "default"), then the TEMPORAL_* variables over it. Throws TemporalProfileError naming the setting when the named file is missing or
 * is not valid TOML, the profile is unknown, or a certificate or key cannot be read. Without an
 * address in either, `localAddress` (npm start's own server).
 */
export function loadTemporalProfile(env: NodeJS.ProcessEnv, localAddress: string): TemporalProfile {
  const vars = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
  const named = vars.TEMPORAL_CONFIG_FILE;
  // The SDK treats a missing file as no file; a file named on purpose must exist.
  let file: string | undefined;
  if (named !== undefined) {
    try {
      readFileSync(named);
    } catch (err) {
      throw new TemporalProfileError(
        `TEMPORAL_CONFIG_FILE: cannot read ${named} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
      );
    }
    file = named;
  } else {
    const fallback = defaultConfigFile(vars);
    try {
      if (fallback) readFileSync(fallback);
      file = fallback;
    } catch {
      file = undefined; // no default file: the variables alone
    }
  }
  const profileName = vars.TEMPORAL_PROFILE;
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({
      ...(file ? { configSource: { path: file } } : { disableFile: profileName === undefined }),
      // Strict: a misspelt TLS key would otherwise connect without the certificate it meant.
      configFileStrict: true,
      overrideEnvVars: vars,
    });
  } catch (err) {
    throw profileError(err, file, profileName);
  }
  if (named !== undefined && profileName === undefined && Object.keys(profile).length === 0) {
    // A file named on purpose whose default profile is missing would silently mean the local server.
    throw profileError(new Error("Profile 'default' not found"), file, 'default');
  }
  const where = (toml: string, envName: string): string =>
    vars[envName] !== undefined
      ? envName
      : `tls.${toml} of profile "${profileName ?? 'default'}" in ${file ? home(file) : 'the profile'}`;
  for (const f of TLS_FILES) {
    const source = profile.tls?.[f.key];
    if (!source || !('path' in source)) continue;
    let text: string;
    try {
      text = readFileSync(source.path, 'utf8');
    } catch (err) {
      throw new TemporalProfileError(
        `${where(f.toml, f.env)}: cannot read ${source.path} (${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`,
      );
    }
    // Only whether it is PEM, never what it holds.
    if (!text.includes(`-----BEGIN `) || !text.includes(f.pem))
      throw new TemporalProfileError(`${where(f.toml, f.env)}: ${source.path} is not a PEM ${f.pem.toLowerCase()}`);
  }
  if (!!profile.tls?.clientCert !== !!profile.tls?.clientKey)
    throw new TemporalProfileError(
      `a client certificate needs its key and a key its certificate: ${profile.tls?.clientCert ? 'client_key_path (TEMPORAL_TLS_CLIENT_KEY_PATH) is missing' : 'client_cert_path (TEMPORAL_TLS_CLIENT_CERT_PATH) is missing'}`,
    );

  const { connectionOptions, namespace } = toClientOptions(profile);
  const address = profile.address ?? localAddress;
  const connection: ConnectionSettings = {
    address,
    ...(connectionOptions.tls !== undefined ? { tls: connectionOptions.tls } : {}),
    ...(profile.apiKey ? { apiKey: profile.apiKey } : {}),
    ...(profile.grpcMeta ? { metadata: profile.grpcMeta } : {}),
  };
  const tls = connectionOptions.tls !== undefined && connectionOptions.tls !== false;
  const parts = [
    `namespace ${namespace ?? 'default'}`,
    ...(file && (profileName || profile.address) ? [`profile "${profileName ?? 'default'}" of ${home(file)}`] : []),
    tls ? (profile.tls?.clientCert ? 'TLS with a client certificate' : 'TLS') : 'no TLS',
    ...(profile.apiKey ? ['API key'] : []),
  ];
  const result = {
    address,
    namespace: namespace ?? 'default',
    external: profile.address !== undefined,
    ...(file && (profileName || profile.address) ? { profile: { name: profileName ?? 'default', file } } : {}),
    summary: `${address} (${parts.join(', ')})`,
  } as TemporalProfile;
  Object.defineProperty(result, 'connection', { value: connection, enumerable: false });
  return result;
}

/** The SDK's and the TOML parser's errors, with the setting named and no line of the file quoted. */
function profileError(err: unknown, file: string | undefined, profileName: string | undefined): TemporalProfileError {
  const e = err as Error & { line?: number; column?: number };
  const shown = file ? home(file) : undefined;
  if (typeof e.line === 'number' && 'codeblock' in e)
    // The parser's message quotes the file's lines, which may hold an API key: only where.
    return new TemporalProfileError(`${shown}: not valid TOML (line ${e.line}, column ${e.column})`);
  if (/^Profile '.*' not found/.test(e.message)) {
    let known: string[];
    try {
      known = file ? Object.keys(loadClientConfig({ configSource: { path: file } }).profiles) : [];
    } catch {
      known = [];
    }
    return new TemporalProfileError(
      `TEMPORAL_PROFILE: no profile "${profileName}" in ${shown ?? 'any file (TEMPORAL_CONFIG_FILE is unset and there is no default temporal.toml)'}` +
        (file ? `; it has ${known.length ? known.map((k) => `"${k}"`).join(', ') : 'none'}` : ''),
    );
  }
  if (/unrecognized in profile\.[^:]+\.tls: .*disable_host_verification/.test(e.message))
    // The Temporal CLI reads it; the TypeScript SDK cannot apply it, and a silent ignore would surprise.
    return new TemporalProfileError(
      `${shown}: tls.disable_host_verification is not supported by the TypeScript SDK (it always verifies the server's name): remove it, or set server_name to the name in the server's certificate`,
    );
  if (e instanceof TypeError)
    return new TemporalProfileError(`${shown ?? 'the config file'}: no [profile.<name>] table in it`);
  return new TemporalProfileError(`${shown ?? 'the connection profile'}: ${e.message}`);
}

/** The settings as TestWorkflowEnvironment.createFromExistingServer takes them (the tests, the chaos soak). */
export function existingServerOptions(connection: ConnectionSettings): {
  address: string;
  connectionOptions: Omit<ConnectionSettings, 'address'>;
} {
  const { address, ...connectionOptions } = connection;
  return { address, connectionOptions };
}

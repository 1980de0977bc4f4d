/**
 * Brings up what every test file shares (under `npm run test:server`, also the real Temporal server): a real Postgres (embedded in a temporary folder, or
 * DATABASE_URL), migrated and seeded as its owner with the three roles of db/roles.ts, and the real
 * payment provider as a separate process on loopback, with the provider's role.
 * Temporal servers are per file (time-skipping or dev server).
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node' with { 'resolution-mode': 'import' };
import { ensurePostgres, type PostgresHandle } from '../../servers/postgres';
import { prepareDatabase, type RoleUrls } from '../../db/roles';
import { startProviderProcess, stopProcess } from '../../platform/processes';
import { realServerPortBlock, startRealTemporal, type RealTemporal } from '../../servers/temporal-server';
import { startCodecServer, type CodecServer } from '../../ops/codec-server';
import type { ConnectionSettings } from '../../ops/temporal-connection';
import { EncryptionCodec, parseKeyList } from '../../platform/payload-codec';
import { dropPersonalTemporalConfig } from './hermetic-env';
import { TEST_PAYLOAD_KEYS } from './payload-keys';

export const TEST_PROVIDER_API_KEY = 'test-provider-key';
export const TEST_PROVIDER_ADMIN_KEY = 'test-provider-admin-key';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The owner's: tests set up and inspect with it. */
    databaseUrl: string;
    /** The app's, the provider's and the read-only role's (db/roles.ts). */
    roleUrls: RoleUrls;
    /** Set only under `npm run test:server`: the real Temporal server on Postgres, and its Web UI. */
    temporalServer:
      | { address: string; connection: ConnectionSettings; uiUrl: string; codec: { url: string; token: string } }
      | undefined;
    providerUrl: string;
    providerApiKey: string;
    providerAdminUrl: string;
    providerAdminKey: string;
  }
}

let pg: PostgresHandle | undefined;
let provider: ChildProcess | undefined;
let real: RealTemporal | undefined;
let codec: CodecServer | undefined;
let tmp: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  dropPersonalTemporalConfig();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-test-'));
  chmodSync(tmp, 0o755); // as root, Postgres runs as the postgres user and must reach its data dir
  pg = await ensurePostgres({
    dataDir: path.join(tmp, 'pg'),
    port: 54000 + (process.pid % 1000),
    database: 'orders_test',
    persistent: false,
  });
  const { urls } = await prepareDatabase(pg.url);
  const started = await startProviderProcess({
    DATABASE_URL: urls.provider,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    PROVIDER_API_KEY: TEST_PROVIDER_API_KEY,
    PROVIDER_ADMIN_KEY: TEST_PROVIDER_ADMIN_KEY,
  });
  provider = started.child;
  project.provide('databaseUrl', pg.url);
  project.provide('roleUrls', urls);
  if (process.env.ORDER_SAGA_TEMPORAL === 'server') {
    // npm run test:server: one real Temporal server on this Postgres for every file, with its Web UI.
    const port = realServerPortBlock(process.pid + 1);
    // Its Web UI decodes through a codec server with the tests' key, as npm start's does.
    codec = await startCodecServer({
      codec: new EncryptionCodec(parseKeyList(TEST_PAYLOAD_KEYS)),
      token: randomBytes(24).toString('base64url'),
      allowOrigins: [`http://127.0.0.1:${port + 21}`],
    });
    real = await startRealTemporal({
      ownerUrl: pg.url,
      port,
      uiPort: port + 21,
      metricsPort: port + 22,
      codecEndpoint: codec.uiEndpoint,
    });
    project.provide('temporalServer', {
      address: real.address,
      connection: real.connection,
      uiUrl: real.uiUrl,
      codec: { url: codec.url, token: codec.token },
    });
  } else project.provide('temporalServer', undefined);
  project.provide('providerUrl', started.url);
  project.provide('providerApiKey', TEST_PROVIDER_API_KEY);
  project.provide('providerAdminUrl', started.adminUrl);
  project.provide('providerAdminKey', TEST_PROVIDER_ADMIN_KEY);
}

export async function teardown(): Promise<void> {
  await real?.stop();
  await codec?.close();
  await stopProcess(provider);
  await pg?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}

/**
 * A secured cluster (`npm run test:server`): the real Temporal server with mTLS on its frontend and
 * between its services, its certificates made here (a throwaway CA, the server's and a client's, on
 * loopback), beside the run's shared server on the same Postgres (its own role and databases). A
 * client without a certificate is refused; the worker process, client.ts (place, status, cancel,
 * schedule), the sweeper, the server's own Schedules and the Temporal CLI all get in with one
 * connection profile, the temporal.toml file the CLI reads too.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { workflowIdFor } from '../domain/order';
import { checkExternalTemporal } from '../ops/cluster-check';
import { readConfig } from '../ops/config';
import { runProcess, startWorkerProcess, stopProcess } from '../platform/processes';
import { devServerExecutable } from '../servers/temporal-dev';
import { realServerPortBlock, startRealTemporal, type RealTemporal } from '../servers/temporal-server';
import { makeTestCerts, type TestCerts } from './support/certs';
import { createProduct, makeOrder, orderRow, testAdmin, testPool, uid } from './support/helpers';
import { dataConverter } from './support/temporal-env';

const ROOT = path.resolve(__dirname, '..');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-mtls-'));
/** What must never be printed: a marker API key given beside the certificate. */
const API_KEY_MARKER = `never-printed-${uid()}`;
let certs: TestCerts;
let server: RealTemporal | undefined;
let worker: ChildProcess | undefined;
let db: Pool;
let client: Client;
let profileEnv: NodeJS.ProcessEnv;
let childEnv: NodeJS.ProcessEnv;
const admin = testAdmin();

beforeAll(async () => {
  certs = makeTestCerts(tmp);
  const port = realServerPortBlock(process.pid + 7);
  server = await startRealTemporal({
    ownerUrl: inject('databaseUrl'),
    port,
    uiPort: port + 21,
    metricsPort: port + 22,
    tls: {
      caFile: certs.ca,
      certFile: certs.serverCert,
      keyFile: certs.serverKey,
      clientCertFile: certs.clientCert,
      clientKeyFile: certs.clientKey,
    },
    database: { role: 'temporal_mtls', temporal: 'temporal_mtls', visibility: 'temporal_mtls_visibility' },
  });
  // The profile file, as a person writes it for their cluster (the Temporal CLI reads the same one).
  const toml = path.join(tmp, 'temporal.toml');
  writeFileSync(
    toml,
    [
      '[profile.mtls]',
      `address = "${server.address}"`,
      'namespace = "default"',
      '[profile.mtls.tls]',
      'server_name = "localhost"',
      `server_ca_cert_path = "${certs.ca}"`,
      `client_cert_path = "${certs.clientCert}"`,
      `client_key_path = "${certs.clientKey}"`,
      '',
    ].join('\n'),
  );
  profileEnv = { TEMPORAL_CONFIG_FILE: toml, TEMPORAL_PROFILE: 'mtls' };
  childEnv = {
    ...profileEnv,
    TASK_QUEUE: `mtls-${uid()}`,
    TEMPORAL_UI_URL: server.uiUrl,
    DATABASE_URL: inject('roleUrls').app,
    READER_DATABASE_URL: inject('roleUrls').reader,
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
  };
  const cfg = readConfig(childEnv);
  client = new Client({
    connection: await Connection.connect(cfg.temporal.connection),
    namespace: cfg.namespace,
    dataConverter: dataConverter(),
  });
  db = testPool();
  worker = await startWorkerProcess({
    ...childEnv,
    WORKER_VERSIONING: 'off',
    WORKER_METRICS_PORT: '0',
    TEMPORAL_METRICS_ADDRESS: 'off',
  });
});

afterAll(async () => {
  await admin.clear();
  await stopProcess(worker);
  await client?.connection.close();
  await db?.end();
  await server?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** `npx tsx client.ts …` as its own process. */
async function cli(args: string[], env: NodeJS.ProcessEnv = childEnv) {
  const r = await runProcess(
    process.execPath,
    [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), ...args],
    env,
  );
  return { code: r.code ?? -1, stdout: r.stdout, stderr: r.stderr };
}

function orderFile(order: unknown): string {
  const file = path.join(tmp, `${uid()}.json`);
  writeFileSync(file, JSON.stringify(order));
  return file;
}

describe('mTLS on the real Temporal server', () => {
  it('refuses a client without a certificate, and one whose certificate another CA signed', async () => {
    const address = server!.address;
    const attempts: [string, () => Promise<unknown>][] = [
      [
        'plaintext',
        async () => (await Connection.connect({ address, connectTimeout: '5s' })).workflowService.getSystemInfo({}),
      ],
      [
        'TLS without a client certificate',
        async () =>
          (
            await Connection.connect({
              address,
              connectTimeout: '5s',
              tls: { serverNameOverride: 'localhost', serverRootCACertificate: readFileSync(certs.ca) },
            })
          ).workflowService.getSystemInfo({}),
      ],
      [
        "another CA's client certificate",
        async () =>
          (
            await Connection.connect({
              address,
              connectTimeout: '5s',
              tls: {
                serverNameOverride: 'localhost',
                serverRootCACertificate: readFileSync(certs.ca),
                clientCertPair: { crt: readFileSync(certs.strangerCert), key: readFileSync(certs.strangerKey) },
              },
            })
          ).workflowService.getSystemInfo({}),
      ],
    ];
    for (const [what, attempt] of attempts) {
      const refused = await attempt().then(
        () => undefined,
        (err: Error) => err,
      );
      expect(refused, what).toBeInstanceOf(Error);
      console.log(`mTLS: ${what}: refused: ${refused!.message.split('\n')[0]}`);
    }

    // client.ts with TLS and the CA but no certificate: refused, exit 1; the API key given is never printed.
    const r = await cli(['status', 'no-such-order'], {
      ...childEnv,
      TEMPORAL_PROFILE: undefined,
      TEMPORAL_CONFIG_FILE: undefined,
      TEMPORAL_ADDRESS: address,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: certs.ca,
      TEMPORAL_TLS_SERVER_NAME: 'localhost',
      TEMPORAL_API_KEY: API_KEY_MARKER,
    });
    console.log(`mTLS: client.ts status without a certificate: exit ${r.code}: ${r.stderr.trim().split('\n')[0]}`);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/cannot reach Temporal at 127\.0\.0\.1:\d+ \(namespace default, TLS, API key\)/);
    expect(r.stdout + r.stderr).not.toContain(API_KEY_MARKER);
  });

  it('with the profile: client.ts place completes an order end to end, status reads it, cancel stops another', async () => {
    const p = await createProduct(db, { stock: 5, priceCents: 900 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    const placed = await cli(['place', '--file', orderFile(order), '--json']);
    expect(placed.code, placed.stderr).toBe(0);
    expect(JSON.parse(placed.stdout)).toMatchObject({ orderId: order.orderId, status: 'COMPLETED' });
    console.log(`mTLS: client.ts place ${order.orderId}: exit ${placed.code}, status COMPLETED`);
    const status = await cli(['status', order.orderId, '--json']);
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ status: 'COMPLETED' });
    expect(await orderRow(db, order.orderId)).toMatchObject({ status: 'COMPLETED' });

    // Cancel before the pivot: the authorization held at the provider meanwhile.
    const second = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    // Held long enough for a second client.ts process to start on a busy machine, and below the worker's provider timeout.
    await admin.set({
      kind: 'delay',
      target: 'authorizations',
      delayMs: 6_000,
      count: 1,
      keyPrefix: `${second.orderId}:`,
    });
    expect((await cli(['place', '--file', orderFile(second), '--no-wait'])).code).toBe(0);
    const cancel = await cli(['cancel', second.orderId, '--reason', 'customer asked', '--json']);
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(JSON.parse(cancel.stdout)).toMatchObject({ status: 'CANCELLED' });
    console.log(`mTLS: client.ts cancel ${second.orderId}: CANCELLED`);

    // The Temporal CLI, with the same file and profile.
    const temporalCli = devServerExecutable();
    if (!temporalCli || temporalCli.type !== 'existing-path') throw new Error('the Temporal CLI is not in the cache');
    const shown = await runProcess(
      temporalCli.path,
      ['workflow', 'describe', '--workflow-id', workflowIdFor(order.orderId), '--profile', 'mtls', '--output', 'json'],
      { TEMPORAL_CONFIG_FILE: profileEnv.TEMPORAL_CONFIG_FILE },
    );
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('WORKFLOW_EXECUTION_STATUS_COMPLETED');
    console.log(`mTLS: temporal workflow describe --profile mtls: exit 0, ${workflowIdFor(order.orderId)} completed`);
    const refused = await runProcess(
      temporalCli.path,
      [
        'workflow',
        'describe',
        '--workflow-id',
        workflowIdFor(order.orderId),
        '--address',
        server!.address,
        '--tls-ca-path',
        certs.ca,
        '--tls-server-name',
        'localhost',
        '--command-timeout',
        '10s',
      ],
      {},
    );
    expect(refused.code).not.toBe(0);
  });

  it("npm start's check of a cluster it did not start: passes with the profile; a missing namespace is named", async () => {
    expect(await checkExternalTemporal(readConfig(childEnv).temporal)).toBe(
      'namespace default found; search attributes all present',
    );
    await expect(
      checkExternalTemporal(readConfig({ ...childEnv, TEMPORAL_NAMESPACE: 'not-there' }).temporal),
    ).rejects.toThrow(
      /^namespace "not-there" does not exist on 127\.0\.0\.1:\d+ \(namespace not-there, profile "mtls" of .*, TLS with a client certificate\): create it/,
    );
  });

  it("the Schedules fire (the server's system worker presents its certificate) and the sweeper runs", async () => {
    const made = await cli(['schedule', 'sweep', '--every', '1m', '--json']);
    expect(made.code, made.stderr).toBe(0);
    const reconcile = await cli(['schedule', 'reconcile', '--every', '1h', '--json']);
    expect(reconcile.code, reconcile.stderr).toBe(0);
    try {
      for (const id of ['sweep', 'reconcile']) {
        // A trigger is carried out by the Schedule's own workflow, on the server's system worker.
        await client.schedule.getHandle(id).trigger();
        let started: { workflowId: string; firstExecutionRunId: string } | undefined;
        for (let i = 0; i < 120 && !started; i++) {
          const d = await client.schedule.getHandle(id).describe();
          started = d.info.recentActions.at(-1)?.action.workflow;
          if (!started) await new Promise((r) => setTimeout(r, 500));
        }
        expect(started, `${id}: no run started`).toBeDefined();
        const run = client.workflow.getHandle(started!.workflowId, started!.firstExecutionRunId);
        await run.result(); // the sweeper's activities call Temporal through the worker's profile too
        console.log(`mTLS: Schedule ${id} fired; its run ${started!.workflowId} completed`);
      }
      const sweeps = await cli(['sweeps', '--json']);
      expect(sweeps.code, sweeps.stderr).toBe(0);
    } finally {
      for (const id of ['sweep', 'reconcile'])
        await client.schedule
          .getHandle(id)
          .delete()
          .catch(() => undefined);
    }
  });
});

/**
 * The health endpoints of the long-running processes (platform/health.ts): the provider as its own
 * process, the worker's metrics server and the codec server answer GET /healthz (alive) and GET /readyz
 * (ready, else 503 with the reason) without a key; a database that does not answer, a worker that does
 * not poll, and a check that hangs each make /readyz a 503 naming why.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { InventoryMetrics } from '../activities/inventory-metrics';
import { startCodecServer } from '../ops/codec-server';
import { databaseAnswers, READY_WITHIN_MS } from '../platform/health';
import { EncryptionCodec, parseKeyList } from '../platform/payload-codec';
import { startProviderProcess, stopProcess } from '../platform/processes';
import { startMetricsServer, workersReady } from '../worker';
import { testPool } from './support/helpers';

let provider: ChildProcess | undefined;
let providerUrl: string;
const servers: http.Server[] = [];
const db = testPool();
/** A pool on a port nothing listens on: every query fails at once. */
const gone = new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none', connectionTimeoutMillis: 500 });

beforeAll(async () => {
  const p = await startProviderProcess({
    DATABASE_URL: inject('roleUrls').provider,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    PROVIDER_API_KEY: 'health-api-key-1234',
    PROVIDER_ADMIN_KEY: 'health-admin-key-1234',
  });
  provider = p.child;
  providerUrl = p.url;
});
afterAll(async () => {
  for (const s of servers) s.close();
  await stopProcess(provider);
  await db.end();
  await gone.end();
});

const get = async (url: string): Promise<{ status: number; body: Record<string, unknown> }> => {
  const r = await fetch(url);
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
};

async function metricsServer(ready?: Parameters<typeof startMetricsServer>[4]): Promise<string> {
  const s = await startMetricsServer(new InventoryMetrics(), 0, '127.0.0.1', undefined, ready);
  servers.push(s);
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/** Just what workersReady reads of a worker. */
const fakeWorker = (state: string, taskQueue: string) =>
  ({ getState: () => state, options: { taskQueue } }) as unknown as Parameters<typeof workersReady>[0]['workers'][0];

describe('health endpoints', () => {
  it('the provider process: alive and ready (its ledger database answers), without an API key', async () => {
    expect(await get(`${providerUrl}/healthz`)).toEqual({ status: 200, body: { ok: true } });
    expect(await get(`${providerUrl}/readyz`)).toEqual({ status: 200, body: { ok: true } });
    expect((await fetch(`${providerUrl}/v1/charges/x`)).status).toBe(401);
  });

  it("the worker's: ready while its workers run and its database answers; else a 503 naming why", async () => {
    const up = await metricsServer(workersReady({ workers: [fakeWorker('RUNNING', 'orders')], db }));
    expect(await get(`${up}/healthz`)).toEqual({ status: 200, body: { ok: true } });
    expect(await get(`${up}/readyz`)).toEqual({ status: 200, body: { ok: true } });

    const lane = await metricsServer(
      workersReady({ workers: [fakeWorker('RUNNING', 'orders'), fakeWorker('FAILED', 'orders-inventory-lane-0')], db }),
    );
    const r = await get(`${lane}/readyz`);
    expect(r.status).toBe(503);
    expect(r.body).toMatchObject({ ok: false, error: 'not_ready' });
    expect(r.body.message).toBe('1 of 2 workers are not polling (orders-inventory-lane-0: FAILED)');
    expect((await get(`${lane}/healthz`)).status).toBe(200);

    const noDb = await get(
      `${await metricsServer(workersReady({ workers: [fakeWorker('RUNNING', 'orders')], db: gone }))}/readyz`,
    );
    expect(noDb.status).toBe(503);
    expect(noDb.body.message).toMatch(/^the database does not answer: /);
  });

  it('a readiness check that hangs is a 503 within its bound, not a hung probe', async () => {
    const hung = await metricsServer(() => new Promise(() => undefined));
    const r = await get(`${hung}/readyz`);
    expect(r.status).toBe(503);
    expect(r.body.message).toBe(`no answer within ${READY_WITHIN_MS} ms`);
  });

  it('databaseAnswers: undefined for a database that answers', async () => {
    expect(await databaseAnswers(db)()).toBeUndefined();
  });

  it('the codec server: alive and ready without its token; decoding still needs it', async () => {
    const codec = new EncryptionCodec(parseKeyList(`k1:${randomBytes(32).toString('base64')}`));
    const server = await startCodecServer({ codec, token: randomBytes(18).toString('base64url'), allowOrigins: [] });
    try {
      expect(await get(`${server.url}/healthz`)).toEqual({ status: 200, body: { ok: true } });
      expect(await get(`${server.url}/readyz`)).toEqual({ status: 200, body: { ok: true } });
      expect((await fetch(`${server.url}/decode`, { method: 'POST', body: '{}' })).status).toBe(401);
    } finally {
      await server.close();
    }
  });
});

/**
 * The health endpoints of each long-running process, for a supervisor and a rolling deploy:
 * `GET /healthz` answers while the process serves at all (alive); `GET /readyz` answers 200 only
 * while it can do its work (its workers poll, its database answers), else 503 with the reason.
 */
import type { Hono } from 'hono';
import type { Pool } from 'pg';
import type { JsonEnv } from './http';

/** Why the process is not ready, or undefined when it is. */
export type Readiness = () => Promise<string | undefined>;

/** How long a readiness check may take before it counts as not ready. */
export const READY_WITHIN_MS = 2_000;

/** The readiness verdict: `ready()` within READY_WITHIN_MS, a throw or a late answer being a reason. */
export async function readiness(ready: Readiness): Promise<{ ok: true } | { ok: false; reason: string }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string>((r) => {
    timer = setTimeout(() => r(`no answer within ${READY_WITHIN_MS} ms`), READY_WITHIN_MS);
  });
  try {
    const reason = await Promise.race([ready().catch((err: Error) => err.message), late]);
    return reason === undefined ? { ok: true } : { ok: false, reason };
  } finally {
    clearTimeout(timer);
  }
}

/** Adds GET /healthz and GET /readyz to `app` (before any authentication: they say nothing secret). */
export function healthRoutes<E extends JsonEnv>(app: Hono<E>, ready: Readiness): void {
  app.get('/healthz', (c) => c.json({ ok: true }));
  app.get('/readyz', async (c) => {
    const r = await readiness(ready);
    return r.ok ? c.json({ ok: true }) : c.json({ ok: false, error: 'not_ready', message: r.reason }, 503);
  });
}

/** Ready while `pool` answers a query. */
export const databaseAnswers =
  (pool: Pool, what = 'the database'): Readiness =>
  async () => {
    try {
      await pool.query('SELECT 1');
      return undefined;
    } catch (err) {
      return `${what} does not answer: ${(err as Error).message}`;
    }
  };

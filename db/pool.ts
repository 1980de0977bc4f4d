import { Pool, type PoolClient, type PoolConfig } from 'pg';

/**
 * Idle connections a long-running server's pool does not close (`min` of a pool; they are opened as
 * the work needs them, so a fresh start has none): opening one costs 10–12 ms here (TCP and the SCRAM
 * handshake, measured by hand: docs/benchmark.md, "Idle latency"), which an order after a quiet spell
 * of more than `idleTimeoutMillis` would otherwise pay again.
 */
export const WARM_CONNECTIONS = 4;

/** Builds the one pool a process uses. Callers pass the URL; nothing here reads the environment. */
export function createPool(connectionString: string, extra: Partial<PoolConfig> = {}): Pool {
  const pool = new Pool({ connectionString, max: 10, idleTimeoutMillis: 10_000, ...extra });
  // An idle client losing its server (a Postgres restart) must not crash the process.
  pool.on('error', () => undefined);
  return pool;
}

/**
 * Runs fn inside BEGIN/COMMIT, rolls back on any error and always releases the client. `begin` is
 * the opening statement (a read-only snapshot, say).
 */
export async function withTransaction<T>(
  pool: Pool,
  fn: (client: PoolClient) => Promise<T>,
  begin = 'BEGIN',
): Promise<T> {
  const client = await pool.connect();
  // If the server goes away between two statements, pg emits 'error' on the checked-out client; the
  // next statement rejects anyway, so the event must not crash the process.
  let broken = false;
  const ignore = (): void => void (broken = true);
  client.on('error', ignore);
  try {
    await client.query(begin);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.off('error', ignore);
    client.release(broken ? new Error('connection lost') : undefined); // a broken client is discarded
  }
}

/** Node's socket errors and Postgres's SQLSTATEs that say the connection, not the statement, failed. */
const CONNECTION_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', '57P01', '57P02', '57P03']);

/**
 * Did the call fail because the server went away (a restart, a dropped connection), so that the same
 * statement may be sent again? Connection-class SQLSTATEs (08…), shutdown codes and socket errors.
 */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (CONNECTION_CODES.has(code) || code.startsWith('08')) return true;
  return (
    typeof e?.message === 'string' &&
    /Connection terminated|connection lost|connection error and is not queryable/i.test(e.message)
  );
}

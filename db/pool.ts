import { Pool, type PoolClient, type PoolConfig } from 'pg';

/**
 * Connections a long-running server keeps open however idle it is (`min` of a pool): opening one
 * costs about 10 ms (TCP and the SCRAM handshake), which an order after a quiet spell would pay in
 * each of its steps' first queries. Measured in docs/benchmark.md ("Idle latency").
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

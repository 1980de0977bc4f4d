/**
 * After a restart (Postgres, the provider, the Temporal server, a deploy): how long until every open
 * order that moves by itself moved again. The orders open at the restart's end, except those waiting
 * on purpose (NEEDS_ATTENTION, UNKNOWN_PAYMENT), are watched until each row has changed since then or
 * ended; every time is Postgres's (`now()` and `updated_at`), one clock.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool } from 'pg';
import { TERMINAL_STATUSES } from '../../domain/order';
import type { Restart } from './stack';

/** Statuses an order waits in on purpose: it moves when a person or the provider answers. */
const WAITING = ['NEEDS_ATTENTION', 'UNKNOWN_PAYMENT'];

/** Watches the open orders from now (at most `boundMs`) and writes what it saw into `restart.moved`. */
export async function watchMoved(reader: Pool, restart: Restart, boundMs = 240_000): Promise<void> {
  const start = await reader.query<{ since: Date; ids: string[] | null }>({
    text: `SELECT now() AS since, array_agg(order_id) AS ids FROM orders
            WHERE NOT (status = ANY ($1::text[])) AND NOT (status = ANY ($2::text[]))`,
    values: [TERMINAL_STATUSES, WAITING],
  });
  const { since } = start.rows[0]!;
  const ids = start.rows[0]!.ids ?? [];
  if (ids.length === 0) {
    restart.moved = 'no open order to move';
    return;
  }
  let still: string[] = ids;
  for (const until = Date.now() + boundMs; ; await sleep(1_000)) {
    const r = await reader
      .query<{ order_id: string; waited_ms: number }>({
        text: `SELECT order_id, (extract(epoch FROM now() - $3::timestamptz) * 1000)::int AS waited_ms FROM orders
                WHERE order_id = ANY ($1::text[]) AND NOT (status = ANY ($2::text[])) AND updated_at <= $3`,
        values: [ids, TERMINAL_STATUSES, since],
      })
      .catch(() => undefined); // Postgres itself restarting: ask again
    if (r) {
      still = r.rows.map((x) => x.order_id);
      if (still.length === 0) {
        const waited = await reader.query<{ ms: number }>({
          text: `SELECT (extract(epoch FROM now() - $1::timestamptz) * 1000)::int AS ms`,
          values: [since],
        });
        restart.moved = `every open order (${ids.length}) moved again within ${waited.rows[0]!.ms} ms`;
        return;
      }
    }
    if (Date.now() > until) break;
  }
  restart.moved = `${still.length} of ${ids.length} open order(s) had not moved ${boundMs / 1000} s after it: ${still.slice(0, 5).join(', ')}`;
}

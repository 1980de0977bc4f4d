/**
 * The soak's order events: after the sagas closed, wait until the relays delivered every event of the
 * soak's orders (the receiver back up), then check what the receiver took against what was written:
 * none lost, none out of order per order, every signature good.
 */
import type { Pool } from 'pg';
import type { Receiver } from './receiver';

export interface EventsAudit {
  written: number;
  delivered: number;
  deadLettered: number;
  /** Neither delivered nor dead-lettered at the end. */
  pending: number;
  /** Requests the receiver took more than once (at least once: a relay killed after the send). */
  redelivered: number;
  /** Events the database says were delivered that the receiver never took. */
  lost: string[];
  /** Orders that ended whose terminal event (completed, cancelled, failed) the receiver never took. */
  terminalMissing: string[];
  /** Orders whose events first arrived out of their order. */
  outOfOrder: string[];
  /** Signatures the receiver refused. */
  refused: number;
}

/** Waits (at most `ms`) until no event of these orders is waiting to be delivered; returns how many still are. */
export async function waitEventsOut(reader: Pool, orderIds: string[], ms: number): Promise<number> {
  const until = Date.now() + ms;
  for (;;) {
    const { rows } = await reader.query<{ n: number }>({
      text: `SELECT count(*)::int AS n FROM order_events
              WHERE order_id = ANY ($1::text[]) AND delivered_at IS NULL AND dead_at IS NULL`,
      values: [orderIds],
    });
    if (rows[0]!.n === 0 || Date.now() > until) return rows[0]!.n;
    await new Promise((r) => setTimeout(r, 500));
  }
}

export async function auditEvents(reader: Pool, receiver: Receiver, orderIds: string[]): Promise<EventsAudit> {
  const { rows } = await reader.query<{ id: string; delivered: boolean; dead: boolean }>({
    text: `SELECT order_id || ':' || seq AS id, delivered_at IS NOT NULL AS delivered, dead_at IS NOT NULL AS dead
             FROM order_events WHERE order_id = ANY ($1::text[])`,
    values: [orderIds],
  });
  const mine = new Set(orderIds);
  const taken = receiver.taken.filter((e) => mine.has(e.orderId));
  const takenIds = new Set(taken.map((e) => e.id));
  const firsts = new Map<string, number[]>();
  const seen = new Set<string>();
  for (const e of taken) {
    if (seen.has(e.id)) continue;
    seen.add(e.id);
    firsts.set(e.orderId, [...(firsts.get(e.orderId) ?? []), e.seq]);
  }
  // What must exist: each ended order's terminal event, received (whatever the database says of it).
  const ended = await reader.query<{ order_id: string; kind: string }>({
    text: `SELECT order_id, 'order.' || lower(status) AS kind FROM orders
            WHERE order_id = ANY ($1::text[]) AND status IN ('COMPLETED', 'CANCELLED', 'FAILED')`,
    values: [orderIds],
  });
  const received = new Set(taken.map((e) => `${e.orderId} ${e.type}`));
  const terminalMissing = ended.rows.filter((r) => !received.has(`${r.order_id} ${r.kind}`)).map((r) => r.order_id);
  const outOfOrder = [...firsts].filter(([, seqs]) => seqs.some((s, i) => i > 0 && s < seqs[i - 1]!)).map(([id]) => id);
  return {
    written: rows.length,
    delivered: rows.filter((r) => r.delivered).length,
    deadLettered: rows.filter((r) => r.dead).length,
    pending: rows.filter((r) => !r.delivered && !r.dead).length,
    redelivered: taken.length - takenIds.size,
    lost: rows.filter((r) => r.delivered && !takenIds.has(r.id)).map((r) => r.id),
    terminalMissing,
    outOfOrder,
    refused: receiver.refused.length,
  };
}

/** The summary's line. */
export const eventsLine = (a: EventsAudit, flaps: number): string =>
  `order events: ${a.written} written, ${a.delivered} delivered (${a.redelivered} again, at least once), ` +
  `${a.deadLettered} dead-lettered, ${a.pending} pending, ${a.lost.length} lost, ${a.terminalMissing.length} ended order(s) without their terminal event, ` +
  `${a.outOfOrder.length} order(s) out of order, ` +
  `${a.refused} signature(s) refused; the receiver failed, went down or stalled ${flaps} times`;

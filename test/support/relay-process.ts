/**
 * One order-event relay as a process of its own (ops/event-relay.ts), for the test that kills it in
 * the middle of a delivery: DATABASE_URL, ORDER_EVENTS_WEBHOOK_URL and ORDER_EVENTS_WEBHOOK_SECRET.
 */
import { createPool } from '../../db/pool';
import { readOrderEventsEndpoint } from '../../ops/config';
import { startEventRelay } from '../../ops/event-relay';

const endpoint = readOrderEventsEndpoint(process.env);
if (!endpoint) throw new Error('ORDER_EVENTS_WEBHOOK_URL is not set');
const db = createPool(process.env.DATABASE_URL!);
startEventRelay(db, endpoint, { idleMs: 50, timeoutMs: 60_000 });
process.stdout.write('relay running\n');

/**
 * Orders like real ones, for the chaos soak: 1–5 lines, 30 % with one hot SKU, some with the
 * catalogue's SKU-LIMITED near its per-customer limit, repeat customers, 5 % declined cards. Each
 * order also gets the person who meddles with it (if anyone): a cancel at some moment, a reset, a
 * second start, a Terminate. About a third of those whose meddle does not need the run's early
 * moments are placed through the orders API, as a storefront would; the rest as the soak's own
 * starts. Deterministic for a seed.
 */
import type { Pool } from 'pg';
import type { OrderInput } from '../../domain/order';
import { unitHash } from '../../orders/load';

/** What a person does to an order besides placing it. Operators resolve every order that escalates. */
export const MEDDLES = [
  'cancel-early', // at a random moment soon after the start
  'cancel-in-authorization', // while the authorization step runs
  'cancel-after-authorization', // once the hold is made (mostly too late: the pivot follows at once)
  'cancel-after-pivot', // after the shipment: must be refused
  'reset-open', // the Web UI's Reset of the running run, to a random workflow task
  'reset-closed', // the same, once the run has closed
  'start-again-same', // `temporal workflow start` of the closed order's ID, same input
  'start-again-other', // the same with other input
  'place-again', // `client.ts place` of the same order file again
  'terminate', // the Web UI's Terminate of the running run at a random moment: the sweeper must heal it
  'delete-after-cancel', // `client.ts cancel` accepted, then `temporal workflow delete` of the run
  'unreadable-signal', // a cancel Signal no key can open (`--input-meta encoding=binary/encrypted`), then Terminate
  'pause-activity', // `temporal activity pause` of a running step, unpaused a while later
  'override-no-build', // a pinned versioning override to a build no worker runs
] as const;
export type Meddle = (typeof MEDDLES)[number] | 'none';

/**
 * The meddles that act on the running run at a chosen moment (its early steps): an order placed
 * through the API is answered only after its reservation, by when a fast saga may have closed and
 * the meddle missed its moment (the soak's coverage would then miss, say, a Reset of an open run).
 * Those orders are started by the soak itself.
 */
const AT_A_MOMENT = new Set<Meddle>([
  'reset-open',
  'cancel-in-authorization',
  'terminate',
  'unreadable-signal',
  'pause-activity',
  'override-no-build',
]);

export interface ChaosOrder {
  input: OrderInput;
  meddle: Meddle;
  /** 0..1, the moment (share of a few seconds) at which a timed meddle acts. */
  when: number;
  /**
   * Placed with `POST /v1/orders` (people/storefront.ts), not started by the soak itself; 'replay':
   * then sent again with the same key, which must answer as the first time.
   */
  viaApi: false | 'place' | 'replay';
}

/** A well-mixed hash of (i, salt) onto [0, 1): the soak's choices are deterministic. */
export const unit = unitHash;

export const LIMITED_SKU = 'SKU-LIMITED';
const PRICE = 990;

export interface Catalogue {
  hot: string;
  cold: string[];
  limitedPrice: number;
}

/** The run's own products (plenty of stock), and a restock of SKU-LIMITED (its limit stays 2 per customer). */
export async function stockCatalogue(db: Pool, tag: string, orders: number): Promise<Catalogue> {
  const hot = `CHAOS-${tag.toUpperCase()}-HOT`;
  const cold = Array.from({ length: 40 }, (_, i) => `CHAOS-${tag.toUpperCase()}-${i}`);
  await db.query({
    text: `INSERT INTO products (sku, name, price_cents, stock, initial_stock)
           SELECT s, 'chaos soak product', $3, $2, $2 FROM unnest($1::text[]) AS s`,
    values: [[hot, ...cold], Math.max(1_000, orders * 10), PRICE],
  });
  const limited = await db.query<{ price_cents: string }>({
    text: `UPDATE products SET stock = stock + $2, initial_stock = initial_stock + $2 WHERE sku = $1 RETURNING price_cents`,
    values: [LIMITED_SKU, orders * 3],
  });
  if (!limited.rowCount) throw new Error(`${LIMITED_SKU} is missing from the catalogue`);
  return { hot, cold, limitedPrice: Number(limited.rows[0]!.price_cents) };
}

/**
 * The orders. Every meddle appears in each block of MEDDLES.length × 3 orders (so a quick soak sees
 * each at least once); the other orders are left alone.
 */
export function makeOrders(n: number, tag: string, cat: Catalogue): ChaosOrder[] {
  const customers = Math.max(8, Math.round(n / 12)); // repeat customers: about 12 orders each
  const block = MEDDLES.length * 3;
  return Array.from({ length: n }, (_, i) => {
    const lines = 1 + Math.floor(unit(i, 1) * 5);
    const items: OrderInput['items'] = [];
    const used = new Set<string>();
    const add = (sku: string, qty: number, unitPriceCents: number): void => {
      if (used.has(sku)) return;
      used.add(sku);
      items.push({ sku, qty, unitPriceCents });
    };
    if (unit(i, 2) < 0.3) add(cat.hot, 1, PRICE);
    // 12 %: SKU-LIMITED, 1 or 2 units, against a limit of 2 per customer: repeat customers hit it.
    if (unit(i, 3) < 0.12) add(LIMITED_SKU, 1 + Math.floor(unit(i, 4) * 2), cat.limitedPrice);
    for (let l = 0; items.length < lines && l < 10; l++)
      add(cat.cold[Math.floor(unit(i * 10 + l, 5) * cat.cold.length)]!, 1 + Math.floor(unit(i * 10 + l, 6) * 3), PRICE);
    const slot = i % block;
    const meddle: Meddle = slot < MEDDLES.length ? MEDDLES[(slot + Math.floor(i / block)) % MEDDLES.length]! : 'none';
    return {
      input: {
        orderId: `chaos-${tag}-${i}`,
        customerId: `cust-${tag}-${Math.floor(unit(i, 7) * customers)}`,
        currency: 'USD',
        paymentMethod: unit(i, 8) < 0.05 ? 'tok_declined' : 'tok_visa',
        items,
      },
      meddle,
      when: unit(i, 9),
      viaApi: !AT_A_MOMENT.has(meddle) && unit(i, 10) < 0.33 ? (unit(i, 11) < 0.5 ? 'replay' : 'place') : false,
    };
  });
}

/**
 * Bring up: the stack (Postgres, Temporal, the provider, the worker processes), the catalogue and the
 * orders to place, the provider's fault rules for them, and the people who will meddle.
 */
import { randomUUID } from 'node:crypto';
import { readConfig } from '../../../ops/config';
import { faultRules } from '../faults';
import { makeOrders, stockCatalogue, type ChaosOrder } from '../orders';
import { SAGA_CONFIG, type SoakOptions } from '../options';
import { People } from '../people';
import { say } from '../say';
import type { ChaosStack } from '../stack';

export interface BroughtUp {
  /** Started: its servers and workers run, its fault rules are set. */
  stack: ChaosStack;
  /** Every order the soak may place, in the order it places them. */
  orders: ChaosOrder[];
  /** Not yet acting: the load phase sets them going. */
  people: People;
}

export async function bringUp(stack: ChaosStack, options: SoakOptions): Promise<BroughtUp> {
  say(
    `starting: Postgres, ${stack.temporalName}, provider, ${options.workerCount} worker processes; ${options.count} orders, ${options.concurrency} in flight`,
  );
  await stack.start(options.workerCount);
  const tag = randomUUID().slice(0, 6);
  const catalogue = await stockCatalogue(stack.db, tag, options.count);
  const orders = makeOrders(options.count, tag, catalogue);
  await stack.setFaults(faultRules(orders, stack.providerTimeoutMs + 500));
  // client.ts's configuration, pointed at the soak's stack: the people act through its commands, and
  // open its payloads with its key (client.ts check reads every open order's).
  process.env.PAYLOAD_KEYS = stack.payloadKeys;
  const cliCfg = readConfig({
    TEMPORAL_ADDRESS: stack.env.address,
    TASK_QUEUE: stack.taskQueue,
    DATABASE_URL: stack.urls.app,
    READER_DATABASE_URL: stack.urls.reader,
    PROVIDER_URL: stack.providerUrl,
    PROVIDER_API_KEY: stack.apiKey,
  });
  return { stack, orders, people: new People(stack, cliCfg, SAGA_CONFIG) };
}

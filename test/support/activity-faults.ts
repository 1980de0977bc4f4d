/**
 * Test-only faults in the real activities (never a hook in production types): a fault runs before an
 * activity (or after it) with its arguments, and an Error it returns fails the attempt; a fault may
 * also wait, to hold an activity at a chosen moment.
 */
import type { OrderActivities } from '../../activities';

type Name = keyof OrderActivities;
/** Returns an Error to fail the attempt, nothing to let it go on. */
export type FaultHook<K extends Name> = (
  ...args: Parameters<OrderActivities[K]>
) => Error | undefined | void | Promise<Error | undefined | void>;
/** A hook alone runs before the activity. */
export type ActivityFaults = { [K in Name]?: FaultHook<K> | { before?: FaultHook<K>; after?: FaultHook<K> } };

/** The real activities, each one named in `faults` wrapped in its hooks. */
export function withFaults(real: OrderActivities, faults: ActivityFaults): OrderActivities {
  type AnyHook = (...args: unknown[]) => ReturnType<FaultHook<Name>>;
  const wrapped: Record<string, unknown> = { ...real };
  for (const [name, fault] of Object.entries(faults) as [Name, AnyHook | { before?: AnyHook; after?: AnyHook }][]) {
    const { before, after } = typeof fault === 'function' ? { before: fault, after: undefined } : fault;
    const activity = real[name] as (...args: unknown[]) => Promise<unknown>;
    wrapped[name] = async (...args: unknown[]) => {
      const early = await before?.(...args);
      if (early) throw early;
      const result = await activity.apply(real, args);
      const late = await after?.(...args);
      if (late) throw late;
      return result;
    };
  }
  return wrapped as unknown as OrderActivities;
}

/** A fault that fails the attempt with `error()` while the request's order is in `orders`. */
export const failWhileIn =
  (orders: ReadonlySet<string>, error: () => Error) =>
  (req: { orderId: string }): Error | undefined =>
    orders.has(req.orderId) ? error() : undefined;

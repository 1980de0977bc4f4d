/** Serial inventory lanes: deterministic helpers shared by the workflow and the worker. */

/** The lane a reservation goes to: SKUs hash over `lanes` lanes, by the order's first SKU. */
export function laneFor(skus: string[], lanes: number): number {
  const first = [...skus].sort()[0] ?? '';
  let h = 0;
  for (let i = 0; i < first.length; i++) h = (h * 31 + first.charCodeAt(i)) >>> 0;
  return h % Math.max(1, lanes);
}

/** The task queue of lane `n` for the main task queue `taskQueue`. */
export const laneTaskQueue = (taskQueue: string, n: number): string => `${taskQueue}-inventory-lane-${n}`;

/** The most lanes a saga's config may name (the worker runs DEFAULT_SAGA_CONFIG.inventoryLanes). */
export const MAX_LANES = 64;

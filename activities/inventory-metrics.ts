/**
 * Per-SKU contention metrics, counted in memory by the process that makes the attempts (never by
 * updating a shared row: that row would become the new contention point). The worker exposes them
 * (prom-client's /metrics, and /stats as JSON); the adaptive router reads the recent abort rate.
 */

export interface SkuCounters {
  attempts: number;
  aborts: number;
  commits: number;
  fallbacks: number;
  laneCommits: number;
}

export interface SkuStats extends SkuCounters {
  sku: string;
  abortRate: number;
  recentAbortRate: number;
}

/** The abort rate's health bands: healthy below 10 %, critical above 30 % (the serial lane's threshold). */
export const ABORT_RATE_HEALTHY = 0.1;
export const ABORT_RATE_CRITICAL = 0.3;

export class InventoryMetrics {
  private readonly counters = new Map<string, SkuCounters>();
  /** Recent CAS outcomes per SKU (at most `window`, none older than `windowMs`). */
  private readonly recent = new Map<string, { at: number; aborted: boolean }[]>();
  /** SKUs in lane mode, until the time given. */
  private readonly hotUntil = new Map<string, number>();

  constructor(
    private readonly opts: {
      window?: number;
      windowMs?: number;
      minSamples?: number;
      cooldownMs?: number;
      now?: () => number;
    } = {},
  ) {}

  private get now(): number {
    return (this.opts.now ?? Date.now)();
  }

  private of(sku: string): SkuCounters {
    let c = this.counters.get(sku);
    if (!c) {
      c = { attempts: 0, aborts: 0, commits: 0, fallbacks: 0, laneCommits: 0 };
      this.counters.set(sku, c);
    }
    return c;
  }

  /** One CAS attempt over these SKUs: committed, or aborted by a conflict. */
  recordAttempt(skus: string[], aborted: boolean): void {
    const at = this.now;
    for (const sku of skus) {
      const c = this.of(sku);
      c.attempts++;
      if (aborted) c.aborts++;
      else c.commits++;
      const r = this.recent.get(sku) ?? [];
      r.push({ at, aborted });
      if (r.length > (this.opts.window ?? 50)) r.shift();
      this.recent.set(sku, r);
    }
  }

  recordFallback(skus: string[]): void {
    for (const sku of skus) this.of(sku).fallbacks++;
  }

  recordLaneCommit(skus: string[]): void {
    for (const sku of skus) this.of(sku).laneCommits++;
  }

  /** Aborted share of the recent CAS attempts; 0 until there are `minSamples` of them. */
  recentAbortRate(sku: string): number {
    const since = this.now - (this.opts.windowMs ?? 2_000);
    const r = (this.recent.get(sku) ?? []).filter((x) => x.at >= since);
    if (r.length < (this.opts.minSamples ?? 10)) return 0;
    return r.filter((x) => x.aborted).length / r.length;
  }

  /** How many cooldowns in a row found the SKU still hot (the next one lasts twice as long). */
  private readonly streak = new Map<string, number>();

  /**
   * The router's question: should this SKU's reservation go to the serial lane? Above the threshold a
   * SKU enters lane mode for a cooldown (1 s, doubling each time a probe finds it still hot, at most
   * 30 s); after that the next attempts probe the optimistic path again, with a fresh window.
   */
  useLane(sku: string, threshold: number): boolean {
    const now = this.now;
    if ((this.hotUntil.get(sku) ?? 0) > now) return true;
    const rate = this.recentAbortRate(sku);
    const measured = (this.recent.get(sku)?.length ?? 0) >= (this.opts.minSamples ?? 10);
    if (rate > threshold) {
      const streak = this.hotUntil.has(sku) ? (this.streak.get(sku) ?? 0) + 1 : 0;
      this.streak.set(sku, streak);
      const base = this.opts.cooldownMs ?? 1_000;
      this.hotUntil.set(sku, now + Math.min(30 * base, base * 2 ** streak));
      this.recent.set(sku, []); // the next probe starts a fresh measurement
      return true;
    }
    if (measured) {
      // A full, clean window: the contention is over.
      this.streak.delete(sku);
      this.hotUntil.delete(sku);
    }
    return false;
  }

  /**
   * After a conflict: should this reservation go to the serial lane now rather than retry? Yes after
   * `laneAfter` conflicts, and at once when a SKU is being probed (it was hot, its cooldown ran out,
   * and no clean window has cleared it yet): a probe that conflicts has its answer.
   */
  laneAfterConflict(skus: string[], conflicts: number, laneAfter: number | undefined): boolean {
    if (laneAfter !== undefined && conflicts >= laneAfter) return true;
    return skus.some((sku) => this.hotUntil.has(sku));
  }

  snapshot(): SkuStats[] {
    return [...this.counters.entries()]
      .map(([sku, c]) => ({
        sku,
        ...c,
        // The abort rate: aborted attempts over task executions (CAS attempts plus lane commits).
        abortRate: c.attempts + c.laneCommits === 0 ? 0 : c.aborts / (c.attempts + c.laneCommits),
        recentAbortRate: this.recentAbortRate(sku),
      }))
      .sort((a, b) => (a.sku < b.sku ? -1 : 1));
  }
}

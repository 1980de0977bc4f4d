/**
 * Per-SKU contention metrics, counted in memory by the process that makes the attempts (never by
 * updating a shared row: that row would become the new contention point). Exposed as Prometheus
 * text and JSON by the worker; the adaptive router reads the recent abort rate.
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

/** Seed 000's health bands for the abort rate. */
export const ABORT_RATE_HEALTHY = 0.1;
export const ABORT_RATE_CRITICAL = 0.3;

export class InventoryMetrics {
  private readonly counters = new Map<string, SkuCounters>();
  /** The last `window` CAS outcomes per SKU (true = aborted), for the recent abort rate. */
  private readonly recent = new Map<string, boolean[]>();

  constructor(
    private readonly window = 50,
    private readonly minSamples = 10,
  ) {}

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
    for (const sku of skus) {
      const c = this.of(sku);
      c.attempts++;
      if (aborted) c.aborts++;
      else c.commits++;
      const r = this.recent.get(sku) ?? [];
      r.push(aborted);
      if (r.length > this.window) r.shift();
      this.recent.set(sku, r);
    }
  }

  recordFallback(skus: string[]): void {
    for (const sku of skus) this.of(sku).fallbacks++;
  }

  recordLaneCommit(skus: string[]): void {
    for (const sku of skus) this.of(sku).laneCommits++;
  }

  /** Aborted share of the last `window` CAS attempts; 0 until there are `minSamples`. */
  recentAbortRate(sku: string): number {
    const r = this.recent.get(sku);
    if (!r || r.length < this.minSamples) return 0;
    return r.filter(Boolean).length / r.length;
  }

  /**
   * Lets the lane's outcomes age the window: a commit through the lane counts as a clean sample, so
   * a SKU that cooled down returns to the optimistic path.
   */
  recordCooldown(skus: string[]): void {
    for (const sku of skus) {
      const r = this.recent.get(sku);
      if (!r) continue;
      r.push(false);
      if (r.length > this.window) r.shift();
    }
  }

  snapshot(): SkuStats[] {
    return [...this.counters.entries()]
      .map(([sku, c]) => ({
        sku,
        ...c,
        // Seed 000: aborted attempts over task executions (CAS attempts plus lane commits).
        abortRate: c.attempts + c.laneCommits === 0 ? 0 : c.aborts / (c.attempts + c.laneCommits),
        recentAbortRate: this.recentAbortRate(sku),
      }))
      .sort((a, b) => (a.sku < b.sku ? -1 : 1));
  }

  prometheus(): string {
    const lines: string[] = [];
    const metric = (name: string, help: string, type: 'counter' | 'gauge', pick: (s: SkuStats) => number): void => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const s of this.snapshot()) lines.push(`${name}{sku="${s.sku.replace(/["\\\n]/g, '_')}"} ${pick(s)}`);
    };
    metric('order_saga_inventory_cas_attempts_total', 'Optimistic (CAS) reservation attempts per SKU.', 'counter', (s) => s.attempts);
    metric('order_saga_inventory_cas_aborts_total', 'CAS attempts aborted by a version conflict, per SKU.', 'counter', (s) => s.aborts);
    metric('order_saga_inventory_fallbacks_total', 'Reservations sent to the serial lane, per SKU.', 'counter', (s) => s.fallbacks);
    metric('order_saga_inventory_lane_commits_total', 'Reservations committed by the serial lane, per SKU.', 'counter', (s) => s.laneCommits);
    metric('order_saga_inventory_abort_rate', 'Aborted attempts over task executions, per SKU.', 'gauge', (s) => s.abortRate);
    metric('order_saga_inventory_recent_abort_rate', 'Abort rate over the recent window, per SKU.', 'gauge', (s) => s.recentAbortRate);
    return `${lines.join('\n')}\n`;
  }
}

/**
 * The contention matrix: every strategy of `strategies.ts` at each level of hot SKUs, one cell after
 * another, on one pool (the same size for every strategy), with the same workers and logic per task.
 */
import type { Pool } from 'pg';
import { progress } from './measure';
import { runCell, setupBenchTable, STRATEGIES, type CellResult } from './strategies';

export interface ContentionOptions {
  /** The numbers of hot SKUs the tasks spread over, one row of cells each. */
  skuLevels: readonly number[];
  workers: number;
  /** Simulated business logic per task. */
  logicMs: number;
  /** Serial lanes for the adaptive strategy. */
  lanes: number;
  /** How long each cell runs. */
  durationMs: number;
}

/** Runs every cell: the SKU levels in order, every strategy at each. */
export async function measureContention(db: Pool, opts: ContentionOptions): Promise<CellResult[]> {
  await setupBenchTable(db);
  const cells: CellResult[] = [];
  const total = opts.skuLevels.length * STRATEGIES.length;
  const { workers, logicMs, durationMs, lanes } = opts;
  for (const skus of opts.skuLevels) {
    for (const strategy of STRATEGIES) {
      progress(`contention ${cells.length + 1}/${total}: ${strategy} on ${skus} SKU(s)…`);
      cells.push(await runCell(db, strategy, skus, { workers, logicMs, durationMs, lanes }));
    }
  }
  progress('');
  return cells;
}

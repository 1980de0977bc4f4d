import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { withTransaction } from '../db/pool';
import { checkInvariants, temporalLookup } from '../db/invariants';
import type { SweeperTemporal } from './sweeper';

export interface ReconciliationSummary {
  runId: string;
  orders: number;
  findings: number;
  rules: Record<string, number>;
}

export function reconciliationActivities({
  db,
  reader = db,
  temporal,
}: {
  db: Pool;
  reader?: Pool;
  /** When given, the checks ask Temporal too: an open order whose run has closed is a finding. */
  temporal?: SweeperTemporal;
}) {
  return {
    /**
     * Runs every invariant check plus the orphan sweep (charges whose order is missing or failed
     * without a refund, sagas past their deadline, and, asking Temporal, open orders whose run has
     * closed, NEEDS_ATTENTION ones included), records each finding as a row and an alert log
     * line. It never compensates: a person decides. Idempotent per runId.
     */
    async runReconciliation(req: { runId: string; deadlineMs: number }): Promise<ReconciliationSummary> {
      // Read through the read-only role (it sees the provider's ledger); the findings are written as the app.
      const workflows = temporal ? temporalLookup(await temporal.client()) : undefined;
      const report = await checkInvariants(reader, { deadlineMs: req.deadlineMs, ...(workflows ? { workflows } : {}) });
      await withTransaction(db, async (c) => {
        await c.query({
          text: `INSERT INTO reconciliation_runs (run_id, orders, violations) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id) DO UPDATE SET orders = EXCLUDED.orders, violations = EXCLUDED.violations, started_at = now()`,
          values: [req.runId, report.orders, report.violations.length],
        });
        await c.query({ text: 'DELETE FROM reconciliation_findings WHERE run_id = $1', values: [req.runId] });
        for (const v of report.violations) {
          await c.query({
            text: 'INSERT INTO reconciliation_findings (run_id, rule, order_ids, detail) VALUES ($1, $2, $3, $4)',
            values: [req.runId, v.rule, v.orderIds, v.detail],
          });
        }
      });
      const rules: Record<string, number> = {};
      for (const v of report.violations) {
        rules[v.rule] = (rules[v.rule] ?? 0) + 1;
        log.error('ALERT reconciliation finding', {
          runId: req.runId,
          rule: v.rule,
          orderIds: v.orderIds,
          detail: v.detail,
        });
      }
      log.info('reconciliation done', { runId: req.runId, orders: report.orders, findings: report.violations.length });
      return { runId: req.runId, orders: report.orders, findings: report.violations.length, rules };
    },
  };
}

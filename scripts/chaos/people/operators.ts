/**
 * The operators: they resolve every NEEDS_ATTENTION saga with `client.ts resolve`, choosing the action
 * the provider's ledger supports (and, now and then, first the one it does not: it must be refused);
 * a hold an operator voids by hand is voided through the provider's API, by the saga's own key.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkflowNames } from '../../../domain/names';
import { authorizeKeyFor } from '../../../domain/order';
import { createProviderClient } from '../../../provider/client';
import type { SagaState } from '../../../workflows/messages';
import { unit } from '../orders';
import { OPERATOR_CLIENT } from '../stack';
import type { PeopleBase } from './base';

export class Operators {
  private readonly handling = new Set<string>();
  private readonly wrongTried = new Set<string>();
  private readonly forced = new Set<string>();
  private stopped = false;

  constructor(private readonly p: PeopleBase) {}

  /** The provider's API, as an operator uses it (the same keys and faults as the worker's calls). */
  private get provider() {
    return createProviderClient({
      baseUrl: this.p.stack.providerUrl,
      apiKey: this.p.stack.apiKey,
      timeoutMs: 5_000,
      clientName: OPERATOR_CLIENT,
    });
  }

  /**
   * Whether to take a rarer action here: the first time it is eligible, always (so the soak's coverage
   * check cannot miss it by chance), then by the order's hash with probability `p`.
   */
  private choose(action: string, n: number, salt: number, p: number): boolean {
    // Recorded at once: operators handle several orders at a time, and only the first is forced.
    if (!this.forced.has(action)) {
      this.forced.add(action);
      return true;
    }
    return unit(n, salt) < p;
  }

  /**
   * `retry` or `mark-resolved` for an escalated order: the first such choice marks it resolved, the
   * second retries (so the coverage check cannot miss either when escalations are few), then by hash.
   */
  private retryOrMark(n: number, salt: number, pMark: number): 'retry' | 'mark-resolved' {
    if (!this.forced.has('resolve mark-resolved')) return (this.forced.add('resolve mark-resolved'), 'mark-resolved');
    if (!this.forced.has('resolve retry')) return (this.forced.add('resolve retry'), 'retry');
    return unit(n, salt) < pMark ? 'mark-resolved' : 'retry';
  }

  /** Resolves NEEDS_ATTENTION sagas until stop(); each order is handled by one operator at a time. */
  async operate(): Promise<void> {
    while (!this.stopped) {
      try {
        const query = `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Running' AND NeedsAttention = true`;
        for await (const wf of this.p.client.workflow.list({ query })) {
          const orderId = wf.workflowId.replace(/^order:/, '');
          if (this.handling.has(orderId)) continue;
          this.handling.add(orderId);
          // A failure (Postgres restarting, say) only means this operator looks again next round.
          void this.handle(orderId)
            .catch(() => undefined)
            .finally(() => this.handling.delete(orderId));
        }
      } catch {
        // visibility unreachable for a moment: look again
      }
      await sleep(1_000);
    }
    while (this.handling.size > 0) await sleep(100);
  }

  stop(): void {
    this.stopped = true;
  }

  /**
   * What the provider says of the order's hold (`<id>:authorize`), asked as a person would (its API,
   * by the hold's key): its status, and whether money is held or taken. Asking also lets the provider
   * finish a hold a crash left `processing`. Undefined when it does not answer (a fault, the outage):
   * the operator looks again later.
   */
  private async ledger(orderId: string): Promise<{ status: string; held: boolean; captured: boolean } | undefined> {
    try {
      const a = await this.provider.getAuthorization(authorizeKeyFor(orderId));
      const status = a?.status ?? 'not_found';
      return { status, held: status === 'authorized' || status === 'captured', captured: status === 'captured' };
    } catch {
      return undefined;
    }
  }

  private async resolve(orderId: string, action: string, note: string, label = ''): Promise<boolean> {
    const name = `resolve ${action}${label}`;
    this.p.count(name, 'sent');
    const r = await this.p.cli(['resolve', orderId, '--action', action, '--note', note]);
    this.p.count(name, r.code === 0 ? 'accepted' : 'refused');
    if (r.code !== 0) await sleep(3_000); // read the refusal, wait a little, look again
    return r.code === 0;
  }

  private async handle(orderId: string): Promise<void> {
    let s: SagaState | undefined;
    try {
      s = await this.p.state(orderId);
    } catch {
      return;
    }
    if (!s?.awaiting) return;
    this.p.escalated.add(orderId);
    const ledger = await this.ledger(orderId);
    if (!ledger) return;
    const paid = ledger.held;
    const says = `provider: hold ${ledger.status}`;
    const n = Number(orderId.replace(/\D/g, '').slice(-6)) || 0;
    if (s.awaiting === 'charge-outcome') {
      if (ledger.status === 'processing') return; // not decided yet: look again later
      const supported = paid ? 'charge-succeeded' : 'charge-failed';
      if (
        !this.wrongTried.has(orderId) &&
        this.choose(`resolve ${paid ? 'charge-failed' : 'charge-succeeded'}, unchecked (must be refused)`, n, 21, 0.3)
      ) {
        // A second operator who did not look at the ledger: the saga must refuse the wrong answer.
        this.wrongTried.add(orderId);
        const wrong = paid ? 'charge-failed' : 'charge-succeeded';
        if (await this.resolve(orderId, wrong, `chaos: unchecked (${says})`, ', unchecked (must be refused)')) {
          this.p.violation(
            'a resolve the provider contradicts is refused',
            orderId,
            `resolve ${wrong} was accepted; ${says}`,
          );
        }
        return;
      }
      await this.resolve(orderId, supported, `chaos: checked (${says})`);
      return;
    }
    if (s.awaiting === 'compensation') {
      if (s.step === 'compensate:voidAuthorization') {
        if (ledger.status === 'processing') return;
        if (paid && !ledger.captured && this.retryOrMark(n, 22, 0.5) === 'mark-resolved') {
          // Void by hand, with the saga's own key (a void is idempotent), then mark it resolved.
          if (await this.voidByHand(orderId))
            await this.resolve(orderId, 'mark-resolved', `chaos: voided by hand (${says})`);
          return;
        }
        // Nothing held and the key closed (or the hold voided, declined, expired): nothing left to void. A
        // key never seen is still open (a late request could hold money): the saga's void must close it.
        if (!paid && ledger.status !== 'not_found' && this.retryOrMark(n, 23, 0.7) === 'mark-resolved') {
          await this.resolve(orderId, 'mark-resolved', `chaos: nothing held (${says})`);
          return;
        }
      }
      await this.resolve(orderId, 'retry', `chaos: transient (${says})`);
      return;
    }
    // capture (the goods shipped, the money not taken) and forward-step: after the pivot. A capture is
    // only ever retried here (mark-resolved needs a capture the provider shows; the saga checks it).
    if (s.awaiting === 'capture') {
      await this.resolve(orderId, 'retry', `chaos: capture again (${says})`);
      return;
    }
    await this.resolve(orderId, this.retryOrMark(n, 24, 0.5), `chaos: ${s.step} (${says})`);
  }

  private async voidByHand(orderId: string): Promise<boolean> {
    const provider = this.provider;
    this.p.count('void by hand (provider API)', 'sent');
    for (let attempt = 1; attempt <= 10; attempt++) {
      try {
        await provider.voidAuthorization(authorizeKeyFor(orderId));
        this.p.count('void by hand (provider API)', 'accepted');
        return true;
      } catch {
        await sleep(500 * attempt); // a fault or the outage: the same void again is safe
      }
    }
    this.p.count('void by hand (provider API)', 'refused');
    return false;
  }
}

/**
 * The answer `client.ts cancel` and `resolve` give when the saga has read the request but not decided
 * it by the end of --wait: a cancel Postgres accepted stands (exit 0); a resolve is the saga's to
 * accept after it checks the ledger, so one still undecided is not accepted (exit 1). Unit tests of
 * these branches, over a fake store and a fake run.
 */
import { describe, expect, it } from 'vitest';
import type { CliContext } from '../cli/context';
import { CliError, EXIT } from '../cli/context';
import { update } from '../cli/update';

/** A context whose store records every request, and whose run has read it and answers `outcome`. */
function fakeContext(outcome: 'pending' | 'refused') {
  const out: string[] = [];
  const signals: string[] = [];
  const store = {
    recordResolve: async () => ({ recorded: true }),
    orderExists: async () => true,
    decideCancel: async () => ({ outcome: 'accepted' as const, message: '' }),
    settleRequest: async () => undefined,
    close: async () => undefined,
  };
  const handle = {
    describe: async () => ({ status: { name: 'RUNNING' } }),
    signal: async (def: { name: string }) => {
      signals.push(def.name);
    },
    query: async () => ({ outcome, message: 'the provider says no' }),
  };
  const ctx = {
    io: { out: (l: string) => out.push(l), err: () => undefined },
    links: { run: () => 'http://ui/run', list: () => '', schedule: () => '' },
    temporal: async () => ({ workflow: { getHandle: () => handle } }),
    needStore: () => store,
    openStore: () => store,
  } as unknown as CliContext;
  return { ctx, out, signals };
}

const failure = async (p: Promise<unknown>): Promise<CliError> => {
  try {
    await p;
  } catch (err) {
    if (err instanceof CliError) return err;
    throw err;
  }
  throw new Error('expected a CliError');
};

describe('cancel and resolve, read but not decided within --wait', () => {
  it('a resolve still undecided exits 1: recorded, not accepted, and says where to look', async () => {
    const { ctx, signals } = fakeContext('pending');
    const err = await failure(
      update('o-1', { command: 'resolve', action: 'charge-succeeded' }, { waitSeconds: 1 }, ctx),
    );
    expect(signals).toEqual(['resolve']);
    expect(err.code).toBe(EXIT.notCompleted);
    expect(err.message).toMatch(/^resolve: recorded, but order o-1's saga has not decided it within 1 s/);
    expect(err.message).toContain('client.ts status o-1');
    expect(err.message).not.toMatch(/accepted/);
  });

  it('a cancel Postgres accepted stands while the saga works on it: exit 0', async () => {
    const { ctx, out } = fakeContext('pending');
    expect(await update('o-1', { command: 'cancel', reason: 'changed my mind' }, { waitSeconds: 1 }, ctx)).toBe(
      EXIT.ok,
    );
    expect(out.join('\n')).toMatch(/cancel accepted and recorded on the order; the saga is still working on it/);
  });

  it('a resolve the saga refused exits 1 with its reason', async () => {
    const { ctx } = fakeContext('refused');
    const err = await failure(
      update('o-1', { command: 'resolve', action: 'charge-succeeded' }, { waitSeconds: 1 }, ctx),
    );
    expect(err.code).toBe(EXIT.notCompleted);
    expect(err.message).toBe('resolve refused: the provider says no');
  });
});

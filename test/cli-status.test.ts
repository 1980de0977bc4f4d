/**
 * `client.ts status` of a running saga asks its `state` query under a deadline of its own
 * (STATE_QUERY_WAIT_MS), not the server's 30 s: when the query is not answered by then, the state is
 * read from the order row and the history, with what the row says a person is awaited for. Unit
 * tests of these branches, over a fake run and a fake store (the real path runs in
 * test/e2e-commands.devserver.test.ts and in the chaos soak's operators).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { CliContext } from '../cli/context';
import { STATE_QUERY_WAIT_MS, register } from '../cli/status';
import { Command } from '@commander-js/extra-typings';
import { CliError, EXIT } from '../cli/context';

/** The error the SDK throws for a query whose gRPC call ended with `code` (4 DEADLINE_EXCEEDED, 1 CANCELLED). */
const grpcFailure = (code: 1 | 4): Error => {
  const details = code === 4 ? 'Deadline exceeded' : 'Call cancelled';
  return Object.assign(new Error('Failed to query Workflow'), {
    cause: Object.assign(new Error(`${code} ${code === 4 ? 'DEADLINE_EXCEEDED' : 'CANCELLED'}: ${details}`), {
      code,
      details,
    }),
  });
};

/**
 * A running saga in NEEDS_ATTENTION whose query answers `answer`: at once; never (its call ends at the
 * deadline, DEADLINE_EXCEEDED or CANCELLED as the SDK cuts it); cancelled before the deadline; or a
 * failure of the handler.
 */
function fakeContext(
  answer: 'at-once' | 'never-deadline' | 'never-cancelled' | 'cancelled-early' | 'refused',
  history: 'readable' | 'server-down' = 'readable',
  store: 'set' | 'none' = 'set',
) {
  const out: string[] = [];
  const err: string[] = [];
  const deadlines: number[] = [];
  let deadline: number | undefined;
  const live = { orderId: 'o-1', status: 'NEEDS_ATTENTION', step: 'releaseInventory', awaiting: 'compensation' };
  const handle = {
    describe: async () => ({
      workflowId: 'order:o-1',
      runId: 'r-1',
      status: { name: 'RUNNING' },
      typedSearchAttributes: { get: () => undefined },
    }),
    fetchHistory: async () => {
      if (history === 'server-down') throw new Error('14 UNAVAILABLE: the server is down');
      return { events: [] };
    },
    query: async () => {
      if (answer === 'refused') throw new Error('query handler threw: boom');
      if (answer === 'at-once') return { ...live, stepsDone: [], compensations: [], compensationsRun: [] };
      if (deadline === undefined) return new Promise<never>(() => undefined); // the server's 30 s, and more
      if (answer === 'cancelled-early') throw grpcFailure(1);
      vi.setSystemTime(deadline); // the wait runs out
      throw grpcFailure(answer === 'never-deadline' ? 4 : 1);
    },
  };
  const client = {
    options: { loadedDataConverter: undefined },
    workflow: { getHandle: () => handle },
    withDeadline: async <R>(at: number, fn: () => Promise<R>): Promise<R> => {
      deadlines.push(at - Date.now());
      deadline = at;
      try {
        return await fn();
      } finally {
        deadline = undefined;
      }
    },
  };
  const orderStore = {
    orderRow: async () => ({
      orderId: 'o-1',
      status: 'NEEDS_ATTENTION',
      reason: 'the release failed for good',
      attentionFrom: 'COMPENSATING',
      attentionStep: 'releaseInventory',
    }),
    close: async () => undefined,
  };
  let code: number | undefined;
  const ctx = {
    io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l) },
    links: { run: () => 'http://ui/run', list: () => '', schedule: () => '' },
    temporal: async () => client,
    openStore: () => (store === 'set' ? orderStore : undefined),
    done: (c: number) => {
      code = c;
    },
  } as unknown as CliContext;
  const run = async (): Promise<number | undefined> => {
    const cli = new Command().exitOverride();
    register(cli, ctx);
    await cli.parseAsync(['status', 'o-1', '--json'], { from: 'user' });
    return code;
  };
  return { run, out, err, deadlines };
}

describe('status of a running saga: the query waits STATE_QUERY_WAIT_MS, then the row answers', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it.each(['never-deadline', 'never-cancelled'] as const)(
    'a query not answered within the wait (%s) is read from the row and the history, with what the row awaits',
    async (answer) => {
      const { run, out, err, deadlines } = fakeContext(answer);
      expect(await run()).toBe(EXIT.ok);
      expect(deadlines).toEqual([STATE_QUERY_WAIT_MS]);
      expect(err.join('\n')).toMatch(
        /the run's state query got no answer within 5 s \(no worker of its build polls any more/,
      );
      const state = JSON.parse(out.join('\n')) as Record<string, unknown>;
      expect(state).toMatchObject({ orderId: 'o-1', status: 'NEEDS_ATTENTION', awaiting: 'compensation' });
      expect(state.step).toBe('compensate:releaseInventory');
    },
  );

  it('a query answered within the wait prints the live state, with nothing on stderr', async () => {
    const { run, out, err, deadlines } = fakeContext('at-once');
    expect(await run()).toBe(EXIT.ok);
    expect(deadlines).toEqual([STATE_QUERY_WAIT_MS]);
    expect(err).toEqual([]);
    expect(JSON.parse(out.join('\n'))).toMatchObject({ status: 'NEEDS_ATTENTION', step: 'releaseInventory' });
  });

  it('with the server itself down, its own error is what the person sees, not a worker blamed', async () => {
    const { run, err } = fakeContext('never-deadline', 'server-down');
    await expect(run()).rejects.toThrow(/14 UNAVAILABLE: the server is down/);
    expect(err).toEqual([]);
  });

  it('with no order store to read instead, a clear error that says what to set', async () => {
    const { run, err } = fakeContext('never-deadline', 'readable', 'none');
    const failure = await run().catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(CliError);
    expect((failure as CliError).code).toBe(EXIT.notCompleted);
    expect((failure as CliError).message).toMatch(
      /^order o-1: its run's state query got no answer within 5 s, and no order store is set to read its row instead \(READER_DATABASE_URL or DATABASE_URL\)/,
    );
    expect(err).toEqual([]);
  });

  it('a call cancelled before the wait ran out is not read as no answer', async () => {
    const { run, err } = fakeContext('cancelled-early');
    await expect(run()).rejects.toThrow(/Failed to query Workflow/);
    expect(err).toEqual([]);
  });

  it('a query that fails for another reason is not hidden behind the row', async () => {
    const { run } = fakeContext('refused');
    await expect(run()).rejects.toThrow(/query handler threw: boom/);
  });
});

/**
 * `client.ts status` of a running saga asks its `state` query under a deadline of its own
 * (STATE_QUERY_WAIT_MS), not the server's 30 s: when the query is not answered by then, the state is
 * read from the order row and the history, with what the row says a person is awaited for. Unit
 * tests of these branches, over a fake run and a fake store (the real path runs in
 * test/e2e-commands.devserver.test.ts and in the chaos soak's operators).
 */
import { describe, expect, it } from 'vitest';
import type { CliContext } from '../cli/context';
import { STATE_QUERY_WAIT_MS, register } from '../cli/status';
import { Command } from '@commander-js/extra-typings';
import { EXIT } from '../cli/context';

/** The gRPC error a call gets when its own deadline passes. */
const deadlineExceeded = (): Error =>
  Object.assign(new Error('Failed to query workflow'), {
    cause: Object.assign(new Error('4 DEADLINE_EXCEEDED: Deadline exceeded'), {
      code: 4,
      details: 'Deadline exceeded',
    }),
  });

/** A running saga in NEEDS_ATTENTION whose query answers `answer` (or never, under a deadline). */
function fakeContext(answer: 'never' | 'at-once' | 'refused', history: 'readable' | 'server-down' = 'readable') {
  const out: string[] = [];
  const err: string[] = [];
  const deadlines: number[] = [];
  let underDeadline = false;
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
      if (!underDeadline) return new Promise<never>(() => undefined); // the server's 30 s, and more
      throw deadlineExceeded();
    },
  };
  const client = {
    options: { loadedDataConverter: undefined },
    workflow: { getHandle: () => handle },
    withDeadline: async <R>(deadline: number, fn: () => Promise<R>): Promise<R> => {
      deadlines.push(deadline - Date.now());
      underDeadline = true;
      try {
        return await fn();
      } finally {
        underDeadline = false;
      }
    },
  };
  const store = {
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
    openStore: () => store,
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
  it('a query not answered within the wait is read from the row and the history, with what the row awaits', async () => {
    const { run, out, err, deadlines } = fakeContext('never');
    expect(await run()).toBe(EXIT.ok);
    expect(deadlines).toHaveLength(1);
    expect(deadlines[0]!).toBeGreaterThan(STATE_QUERY_WAIT_MS - 1_000);
    expect(deadlines[0]!).toBeLessThanOrEqual(STATE_QUERY_WAIT_MS);
    expect(err.join('\n')).toMatch(
      /the run's state query got no answer within 5 s \(no worker of its build polls any more/,
    );
    const state = JSON.parse(out.join('\n')) as Record<string, unknown>;
    expect(state).toMatchObject({ orderId: 'o-1', status: 'NEEDS_ATTENTION', awaiting: 'compensation' });
    expect(state.step).toBe('compensate:releaseInventory');
  });

  it('a query answered within the wait prints the live state, with nothing on stderr', async () => {
    const { run, out, err, deadlines } = fakeContext('at-once');
    expect(await run()).toBe(EXIT.ok);
    expect(deadlines).toHaveLength(1);
    expect(err).toEqual([]);
    expect(JSON.parse(out.join('\n'))).toMatchObject({ status: 'NEEDS_ATTENTION', step: 'releaseInventory' });
  });

  it('with the server itself down, its own error is what the person sees, not a worker blamed', async () => {
    const { run, err } = fakeContext('never', 'server-down');
    await expect(run()).rejects.toThrow(/14 UNAVAILABLE: the server is down/);
    expect(err).toEqual([]);
  });

  it('a query that fails for another reason is not hidden behind the row', async () => {
    const { run } = fakeContext('refused');
    await expect(run()).rejects.toThrow(/query handler threw: boom/);
  });
});

/**
 * `npm run chaos [-- --quick]`: the chaos soak. Brings up the real stack on loopback (its own
 * Postgres, the Temporal dev server, the provider, two worker processes), then places orders like
 * real ones while:
 *   - the provider fails authorizations, captures, voids and their inquiries (lost response after
 *     commit, 5xx before commit, slower than the worker's timeout, and `processing` for inquiries and
 *     voids), has one outage window in which every call fails, and for a few orders loses the
 *     authorization's answer and then says `processing` for a while (those sagas reach
 *     UNKNOWN_PAYMENT and a person);
 *   - each worker process is SIGKILLed on its own schedule and restarted; Postgres is restarted once
 *     and the provider once, each confirmed;
 *   - people meddle, through client.ts and the Temporal client (scripts/chaos/people/): cancels at
 *     chosen moments, Resets of open and closed runs, second starts of closed orders, and operators
 *     who resolve every NEEDS_ATTENTION saga as the provider's ledger supports.
 * Then it waits until every saga has closed, runs the invariant checker and a per-order audit
 * against the provider's ledger, reads every run's history, and prints the summary. Exit code 0 only
 * with 0 violations, every order terminal, and every fault kind and operator action exercised.
 * Bounded: --orders (500; --quick 140) and --max-minutes of load (8; --quick 4), then at most 3
 * minutes to settle.
 *
 * The phases, in order, each in scripts/chaos/phases/: bring up, load and meddle, settle, verdict.
 * This file owns what must be torn down however the soak ends: the temporary folder, the stack's
 * processes and the people's files.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { installRuntime } from '../../platform/runtime';
import { parseOptions, USAGE } from './options';
import type { People } from './people';
import { bringUp } from './phases/bring-up';
import { loadAndMeddle } from './phases/load';
import { settle } from './phases/settle';
import { verdict } from './phases/verdict';
import { say } from './say';
import { ChaosStack } from './stack';

async function main(): Promise<number> {
  const options = parseOptions();
  if (options === 'help') {
    say(USAGE);
    return 0;
  }
  // The SDK's own log lines in this process and its worker processes: errors only.
  installRuntime('ERROR');
  process.env.WORKER_LOG_LEVEL ??= 'ERROR';
  const started = Date.now();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-chaos-'));
  chmodSync(tmp, 0o755);
  const stack = new ChaosStack(
    { dataDir: path.join(tmp, 'pg'), port: 56000 + (process.pid % 900), database: 'chaos', persistent: true },
    options.temporal,
  );
  let people: People | undefined; // set once brought up, for the cleanup
  let cleaned: Promise<void> | undefined;
  const cleanup = (): Promise<void> =>
    (cleaned ??= (async () => {
      // A client call that failed just before the connection closed is retried by the SDK on a timer,
      // which then throws on the closed channel. Every answer the soak needed is in by now: say so,
      // and go on stopping.
      process.on('uncaughtException', (err) => {
        if (!/Channel has been shut down/.test(err.message)) {
          process.stderr.write(`chaos: ${err.stack ?? err.message}\n`);
          process.exit(1);
        }
        say(`teardown: a client call was still being retried when the connection closed (ignored)`);
      });
      people?.stop();
      people?.close();
      await stack.stop();
      rmSync(tmp, { recursive: true, force: true });
    })());
  // Ctrl-C or a kill stops every process the soak started.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      say(`${signal}: stopping everything the soak started…`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  try {
    const up = await bringUp(stack, options);
    people = up.people;
    const loaded = await loadAndMeddle(up, options, started);
    const settled = await settle(up, loaded);
    return await verdict(options, started, up, loaded, settled);
  } finally {
    await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    process.stderr.write(`chaos: ${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);

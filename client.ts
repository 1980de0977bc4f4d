/**
 * The order saga's command line: the entry over cli/, one file per command (its options, checks and
 * help next to its code), all sharing one context built once per run (cli/context.ts). The database
 * is reached only through orders/order-store.ts. `bin/client --help` lists the commands (bin/client
 * runs this file's build, scripts/build-cli.ts; `npx tsx client.ts` runs the sources).
 * Exit codes: 0 success (place: the order COMPLETED), 1 the order ended otherwise or the command
 * failed, 2 invalid input (nothing started, nothing written), 3 duplicate order ID.
 */
import { Command, CommanderError } from '@commander-js/extra-typings';
import type { Client } from '@temporalio/client';
import { readConfig, type AppConfig } from './ops/config';
import { TemporalProfileError } from './ops/temporal-connection';
import { startTracing } from './platform/tracing';
import { register as apiKeys } from './cli/api-keys';
import { register as cancel } from './cli/cancel';
import { register as check } from './cli/check';
import { register as events } from './cli/events';
import { CliError, createContext, EXIT, type CliContext, type Out } from './cli/context';
import { register as findings } from './cli/findings';
import { register as keys } from './cli/keys';
import { register as list } from './cli/list';
import { register as load } from './cli/load';
import { register as place } from './cli/place';
import { register as refund } from './cli/refund';
import { register as resolve } from './cli/resolve';
import { register as schedule } from './cli/schedule';
import { register as stats } from './cli/stats';
import { register as status } from './cli/status';
import { register as sweeps } from './cli/sweeps';
import { register as views } from './cli/views';

// What other programs and the tests take from the command line.
export { CliError, EXIT };
export { loadOrder } from './cli/place';
export { RECONCILE_SCHEDULE_ID, SWEEP_SCHEDULE_ID } from './ops/schedules';

/** The commands, in the order --help lists them. */
const COMMANDS = [
  place,
  status,
  cancel,
  resolve,
  refund,
  list,
  stats,
  check,
  schedule,
  sweeps,
  events,
  findings,
  load,
  keys,
  apiKeys,
  views,
];

/** How the usage lines name the program unless told otherwise: the sources, run by tsx. */
const PROGRAM = 'npx tsx client.ts';

/** The command line: its help and output, then each command (cli/) with its options, checks and help; `ctx.done` receives the exit code. */
function program(ctx: CliContext, name: string): Command {
  const { io } = ctx;
  const cli = new Command(name)
    .description("The order saga's command line: place orders, follow and steer their sagas, check the data.")
    .exitOverride()
    .configureHelp({ helpWidth: 100 })
    .configureOutput({
      writeOut: (s) => io.out(s.replace(/\n$/, '')),
      writeErr: (s) => io.err(s.replace(/\n$/, '')),
      // Commander's own errors are invalid input (exit 2); each names the option or argument.
      outputError: (s, write) => write(`invalid input: ${s.replace(/^error: /, '')}`),
    })
    .showHelpAfterError('(add --help for usage)')
    .addHelpText(
      'after',
      `
Environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE or a Temporal connection profile (TEMPORAL_PROFILE,
TEMPORAL_CONFIG_FILE, TEMPORAL_API_KEY, TEMPORAL_TLS_*: docs/own-temporal.md), TASK_QUEUE,
TEMPORAL_UI_URL, DATABASE_URL (the application's role), READER_DATABASE_URL (the read-only role:
check, findings), WORKER_METRICS_URL (stats), PROVIDER_URL and PROVIDER_API_KEY (refund). Unset: what a running "npm start" recorded in .data/runtime.json, else loopback defaults.

Exit codes: 0 success (place: the order COMPLETED); 1 the order ended otherwise, or the command
failed or was refused; 2 invalid input (named on stderr; nothing started, nothing written);
3 duplicate order ID.`,
    );

  for (const register of COMMANDS) register(cli, ctx);
  return cli;
}

/**
 * Runs one command; returns its exit code. `shared.client`: a Temporal client to use instead of
 * connecting (callers that run many commands in one process); `shared.name`: the program's name in
 * the usage lines.
 */
export async function runCli(
  argv: string[],
  config?: AppConfig,
  io: Out = { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) },
  shared: { client?: Client; name?: string } = {},
): Promise<number> {
  let code: number = EXIT.ok;
  try {
    // A connection profile that cannot be used is invalid input, refused before any command runs.
    const cfg = config ?? readConfigOrRefuse();
    const ctx = createContext(cfg, io, shared, (c) => void (code = c));
    await program(ctx, shared.name ?? PROGRAM).parseAsync(argv, { from: 'user' });
    return code;
  } catch (err) {
    // Help asked for: 0. Any other parse error (already printed, naming the option), or no command: 2.
    if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.invalid;
    if (err instanceof CliError) {
      io.err(err.message);
      return err.code;
    }
    io.err(`error: ${(err as Error).message}`);
    return EXIT.notCompleted;
  }
}

function readConfigOrRefuse(): AppConfig {
  try {
    return readConfig();
  } catch (err) {
    if (err instanceof TemporalProfileError) throw new CliError(`invalid input: ${err.message}`, EXIT.invalid);
    throw err;
  }
}

/**
 * The process's command: runs `argv`, traced when OTEL_EXPORTER_OTLP_ENDPOINT asks for it (the whole
 * command one trace, its Temporal calls inside one span, sent before the process exits), then exits
 * with its code. `name`: how the usage lines call the program (bin/client runs the build).
 */
export function main(argv: string[] = process.argv.slice(2), name = PROGRAM): void {
  const tracing = startTracing('order-saga-client');
  const run = (): Promise<number> => runCli(argv, undefined, undefined, { name });
  void (
    tracing
      ? tracing.tracer().startActiveSpan(`client.ts ${argv[0] ?? ''}`.trim(), (span) => run().finally(() => span.end()))
      : run()
  )
    .then(async (code) => {
      await tracing?.shutdown().catch(() => undefined);
      return code;
    })
    .then((code) => process.exit(code));
}

if (require.main === module) main();

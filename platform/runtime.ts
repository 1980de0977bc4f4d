/**
 * The SDK's runtime for a process: its own log lines (the TypeScript side and the native core, which
 * otherwise prints to the console at WARN whatever the logger says) at one level.
 */
import { format } from 'node:util';
import {
  DefaultLogger,
  makeTelemetryFilterString,
  Runtime,
  type LogEntry,
  type TelemetryOptions,
} from '@temporalio/worker';

export type SdkLogLevel = 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';

/** SDK lines that say what is so by design here: the serial lanes' workers run activities only. */
const EXPECTED = [/^No workflows registered, not polling for workflow tasks$/];

/** The SDK's own format (stderr, time, level, message, metadata), without the expected lines. */
function print({ level, timestampNanos, message, meta }: LogEntry): void {
  if (EXPECTED.some((re) => re.test(message))) return;
  const at = new Date(Number(timestampNanos / 1_000_000n)).toISOString();
  process.stderr.write(
    meta === undefined ? `${at} [${level}] ${message}\n` : `${at} [${level}] ${message} ${format(meta)}\n`,
  );
}

/** Installs the runtime once, before any worker or native connection; `telemetry` adds metrics, say. */
export function installRuntime(level: SdkLogLevel, telemetry: Omit<TelemetryOptions, 'logging'> = {}): void {
  Runtime.install({
    logger: new DefaultLogger(level, print),
    telemetryOptions: { ...telemetry, logging: { filter: makeTelemetryFilterString({ core: level, other: level }) } },
  });
}

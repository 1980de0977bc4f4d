/**
 * The SDK's runtime for a process: its own log lines (the TypeScript side and the native core, which
 * otherwise prints to the console at WARN whatever the logger says) at one level.
 */
import { DefaultLogger, makeTelemetryFilterString, Runtime, type TelemetryOptions } from '@temporalio/worker';

export type SdkLogLevel = 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';

/** Installs the runtime once, before any worker or native connection; `telemetry` adds metrics, say. */
export function installRuntime(level: SdkLogLevel, telemetry: Omit<TelemetryOptions, 'logging'> = {}): void {
  Runtime.install({
    logger: new DefaultLogger(level),
    telemetryOptions: { ...telemetry, logging: { filter: makeTelemetryFilterString({ core: level, other: level }) } },
  });
}

/**
 * The tests reach only the servers they start. The person running them may have a Temporal profile
 * (the default `temporal.toml`, Temporal Cloud's, say) or `TEMPORAL_*` variables in their shell: the
 * project's connection code and the Temporal CLI would both read them. Each process of a test run
 * (the global setup, each test file's worker, and every process they start) drops them first.
 */
import os from 'node:os';
import path from 'node:path';

export function dropPersonalTemporalConfig(): void {
  for (const name of Object.keys(process.env)) if (name.startsWith('TEMPORAL_')) delete process.env[name];
  // Where the default temporal.toml is looked up on Linux: a folder with none in it.
  process.env.XDG_CONFIG_HOME = path.join(os.tmpdir(), 'order-saga-tests-config');
}

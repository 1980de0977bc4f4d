/**
 * bin/client, the command line from its build (scripts/build-cli.ts), as a real process without
 * servers: it builds the bundle when there is none or a source has changed, answers --help without
 * loading the Temporal SDK's client, its protobufs or pg, and loads them when a command needs them.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI_BUNDLE, LAZY } from '../scripts/build-cli';

const ROOT = path.resolve(__dirname, '..');
const SOURCES = `${CLI_BUNDLE}.sources.json`;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-bin-'));
// Prints, as the process exits, which packages it loaded.
const probe = path.join(tmp, 'loaded.js');
writeFileSync(
  probe,
  `process.on('exit', () => process.stderr.write('\\nLOADED ' + JSON.stringify(Object.keys(require.cache)) + '\\n'));`,
);

function binClient(...argv: string[]): { code: number | null; out: string; err: string; loaded: string[] } {
  const r = spawnSync(process.execPath, ['-r', probe, path.join(ROOT, 'bin', 'client'), ...argv], {
    cwd: tmp,
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: '127.0.0.1:1',
      PAYLOAD_KEYS: `test-1:${Buffer.alloc(32, 7).toString('base64')}`,
      OTEL_EXPORTER_OTLP_ENDPOINT: '',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
  const [err, files = '[]'] = r.stderr.split('\nLOADED ');
  const packages = (JSON.parse(files) as string[])
    .map((f) => /node_modules[\\/]((?:@[^\\/]+[\\/])?[^\\/]+)/.exec(f)?.[1]?.replace('\\', '/'))
    .filter((p): p is string => !!p && !p.startsWith('.'));
  return { code: r.status, out: r.stdout, err: err!, loaded: [...new Set(packages)] };
}

const sources = (): Record<string, number> =>
  (JSON.parse(readFileSync(SOURCES, 'utf8')) as { sources: Record<string, number> }).sources;

describe('bin/client', () => {
  it('builds the bundle when a source changed, and answers --help without loading the SDK client', () => {
    // A source's recorded time that is not its own: the next run builds again.
    if (binClient('--help').code !== 0) throw new Error('bin/client --help failed');
    const before = sources();
    expect(Object.keys(before)).toEqual(expect.arrayContaining(['client.ts', 'cli/status.ts', 'ops/config.ts']));
    writeFileSync(SOURCES, JSON.stringify({ sources: { ...before, 'client.ts': 0 } }));

    const help = binClient('--help');
    expect(help.code, help.err).toBe(0);
    expect(sources()['client.ts']).toBe(before['client.ts']);
    expect(help.out).toMatch(/^Usage: bin\/client \[options\] \[command\]/);
    for (const c of ['place', 'status', 'cancel', 'resolve', 'list', 'check', 'schedule', 'keys'])
      expect(help.out).toMatch(new RegExp(`^  ${c}\\b`, 'm'));
    expect(help.loaded).toContain('@commander-js/extra-typings');
    for (const p of LAZY) expect(help.loaded).not.toContain(p);
  });

  it('invalid input: exit 2, naming it, before the SDK is loaded', () => {
    const r = binClient('status', 'a'.repeat(65));
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/argument 'orderId'/);
    expect(r.loaded).not.toContain('@temporalio/client');
  });

  it('a command that needs Temporal loads the client on first use, and says when it cannot reach it', () => {
    const r = binClient('status', 'o-1');
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/cannot reach Temporal at 127\.0\.0\.1:1/);
    expect(r.loaded).toContain('@temporalio/client');
  });
});

process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));

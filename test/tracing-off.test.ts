/**
 * Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT is set, and off it loads no OpenTelemetry code:
 * a fresh process loads the worker, the provider's entry and the client's, and starts tracing as
 * their mains do; then its require cache is read. @opentelemetry/api alone may be there: prom-client
 * (the worker's metrics) requires it on its own, and it is a no-op facade without an SDK.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { otlpTracesUrl, tracingRequested } from '../platform/tracing';

const ROOT = path.resolve(__dirname, '..');

const SCRIPT = `
const { startTracing, activeTracing, tracingWorkflowModules } = require('./platform/tracing.ts');
require('./worker.ts');
require('./provider/server.ts');
require('./client.ts');
require('./cli/context.ts');
const tracing = startTracing('order-saga-worker');
const loaded = Object.keys(require.cache).filter((f) =>
  /[\\\\/]node_modules[\\\\/](@opentelemetry[\\\\/](?!api[\\\\/])|@temporalio[\\\\/]interceptors-opentelemetry)/.test(f),
);
process.stdout.write(JSON.stringify({
  started: tracing !== undefined,
  active: activeTracing() !== undefined,
  workflowModules: tracingWorkflowModules(),
  loaded: [...new Set(loaded.map((f) => f.replace(/.*node_modules[\\\\/]/, '').split(/[\\\\/]/).slice(0, 2).join('/')))],
}));
void tracing?.shutdown().then(() => process.exit(0));
if (!tracing) process.exit(0);
`;

function probe(extra: NodeJS.ProcessEnv): {
  started: boolean;
  active: boolean;
  workflowModules: string[];
  loaded: string[];
} {
  const env = { ...process.env, ...extra };
  for (const k of Object.keys(env)) if (k.startsWith('OTEL_') && !(k in extra)) delete env[k];
  const r = spawnSync(process.execPath, ['--import', 'tsx', '-e', SCRIPT], {
    cwd: ROOT,
    env,
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (r.status !== 0) throw new Error(`probe exited ${r.status ?? r.signal}: ${r.stderr}`);
  return JSON.parse(r.stdout) as { started: boolean; active: boolean; workflowModules: string[]; loaded: string[] };
}

describe('tracing off', () => {
  it('without OTEL_EXPORTER_OTLP_ENDPOINT: nothing starts and no OpenTelemetry SDK module is loaded', () => {
    const off = probe({});
    expect(off).toEqual({ started: false, active: false, workflowModules: [], loaded: [] });
  });

  it('with it: the same entries start tracing and load the SDK (the probe above would see it)', () => {
    // A closed port: nothing is exported, the probe only looks at what got loaded.
    const on = probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_BSP_EXPORT_TIMEOUT: '200' });
    expect(on.started).toBe(true);
    expect(on.active).toBe(true);
    expect(on.workflowModules).toEqual([expect.stringMatching(/interceptors-opentelemetry.*workflow-interceptors/)]);
    expect(on.loaded).toEqual(
      expect.arrayContaining([
        '@opentelemetry/sdk-trace-node',
        '@opentelemetry/exporter-trace-otlp-http',
        '@opentelemetry/instrumentation-pg',
        '@temporalio/interceptors-opentelemetry',
      ]),
    );
  });
});

describe('the OTLP endpoint variables', () => {
  it.each([
    [{}, undefined],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '' }, undefined],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: ' ' }, undefined],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318/' }, 'http://127.0.0.1:4318/v1/traces'],
    [
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '' },
      'http://127.0.0.1:4318/v1/traces',
    ],
    [
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://h:1/t' },
      'http://h:1/t',
    ],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://h:1/t' }, 'http://h:1/t'],
  ])('%j: an empty variable is unset; traces URL %s', (env, url) => {
    expect(otlpTracesUrl(env)).toBe(url);
    expect(tracingRequested(env)).toBe(url !== undefined);
  });
});

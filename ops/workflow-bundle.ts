/**
 * How every bundle of the project's workflows is made: its entry, the failure converter the workers
 * use (so failures stay encoded inside the sandbox too), and the modules preloaded into each reused V8
 * context.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { FAILURE_CONVERTER_PATH } from '../platform/payload-codec';

/** The workflows' entry: workflows/index.ts in the sources (tsx, vitest: plain require knows no .ts), else the built file. */
export const WORKFLOWS_PATH = existsSync(path.join(__dirname, '../workflows/index.ts'))
  ? path.join(__dirname, '../workflows/index.ts')
  : require.resolve('../workflows');

/**
 * The workflows and everything they import, evaluated once per reused V8 context and shared by every
 * run in it, instead of once per run (the SDK's `preloadModules`). Safe only while no module of
 * workflows/ or domain/ keeps state at module scope: test/workflow-modules.test.ts checks that, and
 * the SDK freezes what they export.
 */
export const PRELOAD_MODULES = [WORKFLOWS_PATH];

/** The bundler options every worker and bundle of the saga's workflows shares. */
export const workflowBundleOptions = () => ({
  failureConverterPath: FAILURE_CONVERTER_PATH,
  preloadModules: PRELOAD_MODULES,
});

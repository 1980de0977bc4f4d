/**
 * The command line's build: client.ts and the project's modules it imports, bundled by esbuild into
 * one CommonJS file that `bin/client` loads in its own process (no tsx, no second Node process). It
 * is made on first use and again whenever a source it holds has changed: beside it, a list of those
 * sources with their modification times, which `bin/client` compares before loading the bundle.
 * It lives in node_modules/.cache/, so `npm ci` clears it.
 *
 * Two things differ from running the sources:
 *  - packages stay outside the bundle, required from node_modules, and the heavy ones (LAZY) are
 *    required on first use rather than at start: `--help` and a command that fails its input check
 *    never load the Temporal SDK's client or protobufs (most of the start-up time);
 *  - `__dirname` in a bundled module is its source folder, as it is when the sources run.
 */
import { mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { build, type Plugin } from 'esbuild';

const ROOT = path.resolve(__dirname, '..');
/** The bundle; its sources' list is `${CLI_BUNDLE}.sources.json`. bin/client names both too. */
export const CLI_BUNDLE = path.join(ROOT, 'node_modules', '.cache', 'order-saga', 'client.js');

/**
 * Packages required when one of their exports is first read, not when the bundle starts. A module
 * that reads one at its top level (a class extending one of its classes, a namespace import) loads
 * it then: later, never wrong.
 */
export const LAZY = ['@temporalio/client', '@temporalio/proto', 'pg'] as const;

/** An external LAZY package's require, marked in the output for `lazyRequires` to rewrite. */
const LAZY_MARK = 'lazy-require:';

/** Keeps each LAZY package outside the bundle, its require marked. */
const lazyPackages: Plugin = {
  name: 'lazy-packages',
  setup(b) {
    const filter = new RegExp(`^(${LAZY.map((p) => p.replace(/[/.]/g, '\\$&')).join('|')})$`);
    b.onResolve({ filter }, (args) => ({ path: `${LAZY_MARK}${args.path}`, external: true }));
  },
};

/**
 * The output with each marked require made lazy: an object whose properties are the package's
 * exports, the package required on the first read. (esbuild reads a named import's property where it
 * is used, so `import { Client } from '@temporalio/client'` loads the package when Client is first used.)
 */
function lazyRequires(code: string): string {
  const helper = `const __lazyRequire = (id) => {
  let m;
  const load = () => (m ??= require(id));
  return new Proxy({}, {
    get: (_, k) => load()[k],
    has: (_, k) => k in load(),
    ownKeys: () => Reflect.ownKeys(load()),
    getOwnPropertyDescriptor: (_, k) => {
      const d = Reflect.getOwnPropertyDescriptor(load(), k);
      return d && { ...d, configurable: true };
    },
    getPrototypeOf: () => Reflect.getPrototypeOf(load()),
  });
};
`;
  const marked = new RegExp(`require\\("${LAZY_MARK}([^"]+)"\\)`, 'g');
  return code.replace(/^("use strict";\n)?/, (strict) => `${strict}${helper}`).replace(marked, '__lazyRequire("$1")');
}

/** `__dirname` in each project module that uses it: its own folder, found from the bundle's. */
const ownDirname: Plugin = {
  name: 'own-dirname',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, async (args) => {
      const source = await readFile(args.path, 'utf8');
      if (args.path.includes(`${path.sep}node_modules${path.sep}`) || !source.includes('__dirname')) return undefined;
      const rel = path.relative(path.dirname(CLI_BUNDLE), path.dirname(args.path));
      return {
        loader: 'ts',
        contents: `const __dirname = require('node:path').join(__filename, '..', ${JSON.stringify(rel)});\n${source}`,
      };
    });
  },
};

/** Builds the bundle and its sources' list (each written whole, then renamed: a concurrent run reads either). */
export async function buildCli(): Promise<void> {
  const started = Date.now();
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: [path.join(ROOT, 'client.ts')],
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: `node${process.versions.node.split('.')[0]}`,
    packages: 'external',
    plugins: [lazyPackages, ownDirname],
    write: false,
    metafile: true,
    outfile: CLI_BUNDLE,
    logLevel: 'error',
  });
  const sources = [
    ...Object.keys(result.metafile.inputs).filter((f) => !f.includes(':')),
    path.relative(ROOT, __filename),
  ];
  // A source changed while the build read it is recorded as never seen, so the next run builds again.
  const mtimes = Object.fromEntries(
    sources.map((f) => {
      const mtime = statSync(path.join(ROOT, f)).mtimeMs;
      return [f, mtime < started ? mtime : 0];
    }),
  );
  mkdirSync(path.dirname(CLI_BUNDLE), { recursive: true });
  const write = (file: string, contents: string): void => {
    writeFileSync(`${file}.${process.pid}`, contents);
    renameSync(`${file}.${process.pid}`, file);
  };
  write(CLI_BUNDLE, lazyRequires(result.outputFiles[0]!.text));
  write(`${CLI_BUNDLE}.sources.json`, `${JSON.stringify({ builtInMs: Date.now() - started, sources: mtimes })}\n`);
}

/**
 * The workflows and everything they import are preloaded once per reused V8 context and shared by every
 * run in it (ops/workflow-bundle.ts, the SDK's preloadModules). A module that kept state at module
 * scope would then carry one run's state into the next: no module of workflows/ or domain/ may.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { PRELOAD_MODULES, WORKFLOWS_PATH } from '../ops/workflow-bundle';

const ROOT = path.resolve(__dirname, '..');
const SHARED_DIRS = ['workflows', 'domain'];
const MUTABLE_CONTAINERS = new Set(['Map', 'Set', 'WeakMap', 'WeakSet']);

/** Each module-scope declaration in `source` that can hold state between runs, as `line: text`. */
function moduleScopeState(file: string, source: string): string[] {
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node) =>
    `${file}:${sf.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText().split('\n')[0]}`;
  for (const stmt of sf.statements) {
    if (!ts.isVariableStatement(stmt)) continue;
    const flags = stmt.declarationList.flags;
    if (!(flags & ts.NodeFlags.Const)) {
      found.push(at(stmt));
      continue;
    }
    for (const d of stmt.declarationList.declarations) {
      const init = d.initializer;
      if (
        init &&
        ts.isNewExpression(init) &&
        ts.isIdentifier(init.expression) &&
        MUTABLE_CONTAINERS.has(init.expression.text)
      )
        found.push(at(stmt));
    }
  }
  return found;
}

const sharedFiles = (): string[] =>
  SHARED_DIRS.flatMap((dir) =>
    readdirSync(path.join(ROOT, dir))
      .filter((f) => f.endsWith('.ts'))
      .map((f) => path.join(dir, f)),
  );

describe('the preloaded workflow modules', () => {
  it('are the workflows entry, which every worker and bundle loads', () => {
    expect(PRELOAD_MODULES).toEqual([WORKFLOWS_PATH]);
    expect(path.relative(ROOT, WORKFLOWS_PATH)).toMatch(/^workflows[\\/]index\.[jt]s$/);
  });

  it('keep no state at module scope (no let or var, no Map or Set) in workflows/ and domain/', () => {
    const files = sharedFiles();
    expect(files.length).toBeGreaterThan(10);
    const state = files.flatMap((f) => moduleScopeState(f, readFileSync(path.join(ROOT, f), 'utf8')));
    expect(state).toEqual([]);
  });

  it('the check finds module-scope state when it is there', () => {
    const source = [
      'let count = 0;',
      'var seen = [];',
      'const byRun = new Map<string, number>();',
      'const LIMIT = 3;',
      'export function f() { let local = 1; return local + LIMIT; }',
    ].join('\n');
    expect(moduleScopeState('x.ts', source)).toEqual([
      'x.ts:1: let count = 0;',
      'x.ts:2: var seen = [];',
      'x.ts:3: const byRun = new Map<string, number>();',
    ]);
  });
});

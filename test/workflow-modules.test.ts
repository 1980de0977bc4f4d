/**
 * The workflows and everything they import are preloaded once per reused V8 context and shared by every
 * run in it (ops/workflow-bundle.ts, the SDK's preloadModules). A module that kept state at module
 * scope would then carry one run's state into the next. The SDK freezes what a preloaded module
 * exports, but not what it keeps to itself, nor the inside of a Map or a Set: so no module the
 * workflows load may hold anything that can change at module scope.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { PRELOAD_MODULES, WORKFLOWS_PATH } from '../ops/workflow-bundle';

const ROOT = path.resolve(__dirname, '..');

/** What a module-scope `const` may hold: an initializer that cannot change after it is made. */
function unchanging(init: ts.Expression): boolean {
  let e = init;
  while (ts.isAsExpression(e) || ts.isSatisfiesExpression(e) || ts.isParenthesizedExpression(e)) {
    // `[...] as const` and `{...} as const` are read-only by type; anything else is judged by what it wraps.
    if (ts.isAsExpression(e) && e.type.getText() === 'const') return true;
    e = e.expression;
  }
  if (ts.isNewExpression(e)) return false; // a Map, a Set, an instance of any class: it can change
  if (ts.isArrayLiteralExpression(e)) return e.elements.length > 0; // `[]` is only there to be filled
  if (ts.isObjectLiteralExpression(e)) return e.properties.length > 0; // likewise `{}`
  return true;
}

/** Each module-scope declaration in `source` that can hold state between runs, as `file:line: text`. */
function moduleScopeState(file: string, source: string): string[] {
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node) =>
    `${file}:${sf.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText().split('\n')[0]}`;
  const visit = (node: ts.Node, topLevel: boolean) => {
    if (topLevel && ts.isVariableStatement(node)) {
      if (!(node.declarationList.flags & ts.NodeFlags.Const)) found.push(at(node));
      else if (node.declarationList.declarations.some((d) => d.initializer && !unchanging(d.initializer)))
        found.push(at(node));
    }
    // A class's static field is module state wherever the class is declared.
    if (ts.isPropertyDeclaration(node) && node.modifiers?.some((m) => m.kind === ts.SyntaxKind.StaticKeyword))
      if (
        !node.modifiers.some((m) => m.kind === ts.SyntaxKind.ReadonlyKeyword) ||
        !node.initializer ||
        !unchanging(node.initializer)
      )
        found.push(at(node));
    ts.forEachChild(node, (child) => visit(child, false));
  };
  for (const stmt of sf.statements) visit(stmt, true);
  return found;
}

/** The project's files a module loads at run time (relative imports and re-exports; `import type` loads nothing). */
function loadedFiles(entry: string): string[] {
  const seen = new Set<string>();
  const walk = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    for (const stmt of sf.statements) {
      const spec =
        (ts.isImportDeclaration(stmt) && !stmt.importClause?.isTypeOnly) ||
        (ts.isExportDeclaration(stmt) && !stmt.isTypeOnly)
          ? stmt.moduleSpecifier
          : undefined;
      if (!spec || !ts.isStringLiteral(spec) || !spec.text.startsWith('.')) continue;
      const base = path.resolve(path.dirname(file), spec.text);
      const target = [`${base}.ts`, path.join(base, 'index.ts')].find((f) => existsSync(f));
      if (!target) throw new Error(`${path.relative(ROOT, file)}: cannot resolve ${spec.text}`);
      walk(target);
    }
  };
  walk(entry);
  return [...seen].map((f) => path.relative(ROOT, f)).sort();
}

describe('the preloaded workflow modules', () => {
  it('are the workflows entry, which every worker and bundle loads', () => {
    expect(PRELOAD_MODULES).toEqual([WORKFLOWS_PATH]);
    expect(path.relative(ROOT, WORKFLOWS_PATH)).toMatch(/^workflows[\\/]index\.[jt]s$/);
  });

  it('and every module of ours they load keep no state at module scope', () => {
    const files = loadedFiles(WORKFLOWS_PATH);
    expect(files.length).toBeGreaterThan(15);
    expect(files).toEqual(expect.arrayContaining(['workflows/order-saga.ts', 'domain/order.ts']));
    expect(files.every((f) => /^(workflows|domain)\//.test(f))).toBe(true);
    const state = files.flatMap((f) => moduleScopeState(f, readFileSync(path.join(ROOT, f), 'utf8')));
    expect(state).toEqual([]);
  });

  it('the check finds module-scope state when it is there, and passes what cannot change', () => {
    const source = [
      'let count = 0;',
      'var seen = 1;',
      'const byRun = new Map<string, number>() as Map<string, number>;',
      'const cache: Record<string, number> = {};',
      'const queue = [] satisfies number[];',
      'class Saga { static runs = 0; static readonly LIMIT = 3; private n = 0; }',
      'const LIMIT = 3;',
      "const KINDS = ['a', 'b'] as const;",
      "const OPTS = { retry: { maximumAttempts: 1 }, codes: ['x'] };",
      'export function f() { let local = 1; const m = new Map(); return local + LIMIT + m.size; }',
    ].join('\n');
    expect(moduleScopeState('x.ts', source)).toEqual([
      'x.ts:1: let count = 0;',
      'x.ts:2: var seen = 1;',
      'x.ts:3: const byRun = new Map<string, number>() as Map<string, number>;',
      'x.ts:4: const cache: Record<string, number> = {};',
      'x.ts:5: const queue = [] satisfies number[];',
      'x.ts:6: static runs = 0;',
    ]);
  });
});

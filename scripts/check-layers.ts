/**
 * The layer check (part of `npm run lint`): lists the imports between the project's top-level
 * folders and files, prints the folder-to-folder table, and exits 1 naming each import that
 *  - goes upward in LAYERS below (a folder may import its own layer and any layer beneath it), or
 *  - closes an import loop, between folders or between files (a loop inside one folder counts too), or
 *  - imports code where a rule in TYPE_ONLY allows only types.
 *
 * Every import counts: `import`, `export … from`, `import type`, `import('…')`, `require('…')` and
 * `require.resolve('…')` (a worker's workflowsPath). Type-only imports count too, because a type
 * moving between layers drags its meaning along. Where only types may cross (workflows/ on activities/),
 * a named rule in TYPE_ONLY says so.
 *
 * Usage: tsx scripts/check-layers.ts [--quiet]   (--quiet: print only the problems)
 */
import { readdirSync, readFileSync, statSync, existsSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * The layers, lowest first; the units in one layer may import each other (but not in a loop).
 *  - platform/: helpers over Node itself: child processes (start, wait until ready, stop), the JSON
 *    HTTP edge (hono on Node's server), the payload codec and failure converter. Nothing of ours below
 *    it, so the local servers (servers/), the provider, the worker and every program can use the one helper.
 *  - domain/: types, the input schema and pure rules. Depends on nothing of ours, so every layer can use it.
 *  - db/: the schema's code: the pool, transactions, migrations, roles, and the read-only invariant checker.
 *  - provider/: the payment provider (its ledger on db/, its routes and entry, its HTTP client and wire types).
 *  - activities/: the saga's side effects, on db/ and the provider's client.
 *  - workflows/: deterministic code; it knows the activities only by type (rule workflow-bundle in TYPE_ONLY).
 *    Beside it, what callers need of the saga: its messages and search attributes.
 *  - ops/: what operates the system: configuration, the Temporal connection, Worker Versioning, the
 *    Schedules and their check, the outbox relay, the cluster check, the codec server.
 *  - servers/: what starts and stops the local servers: embedded Postgres, the Temporal dev server
 *    (with the saga's search attributes), the real Temporal server and its Web UI server. On db/
 *    (pool, roles), ops/, platform/ and the search attributes of workflows/; beside ops/.
 *  - orders/: what client.ts and the API use to place, follow and change orders: the saga's start
 *    options, placing, cancel and resolve, the order store, API keys, outcomes, a closed run's state,
 *    the load. It starts workflows and reads their messages, so it sits above them, and on ops/.
 *  - entry points: worker.ts, client.ts, cli/, api/, scripts/, bench/. Programs that put the layers together;
 *    cli/ holds client.ts's commands (client.ts imports them, never the other way round); api/ is the
 *    orders API's process (what it shares with client.ts, such as placing an order, is in orders/).
 *  - test/: may import anything; nothing imports it.
 */
const LAYERS: readonly (readonly string[])[] = [
  ['platform'],
  ['domain'],
  ['db'],
  ['provider'],
  ['activities'],
  ['workflows'],
  ['ops', 'servers'],
  ['orders'],
  ['worker.ts', 'client.ts', 'cli', 'api', 'scripts', 'bench'],
  ['test'],
];

/**
 * Imports that the order allows but that must be type-only, each a named rule. workflows/ sits above
 * activities/ (it calls them), yet its code runs in Temporal's deterministic sandbox and is bundled
 * on its own: it may import only the *types* of activities (proxyActivities<OrderActivities>), of
 * the provider and of db/ — never their code (pg, fetch, clocks). domain/ is pure, so it is imported
 * freely.
 */
const TYPE_ONLY: readonly { name: string; from: string; to: readonly string[]; why: string }[] = [
  {
    name: 'workflow-bundle',
    from: 'workflows',
    to: ['db', 'provider', 'activities'],
    why: "workflow code may know activities (and what they use) only by type: `import type … from '../activities'`",
  },
];

const EXTENSIONS = ['.ts', '.tsx', '.mts', '.cts'];
const SKIP_DIRS = new Set(['node_modules', '.git', '.data', 'artifacts', 'results']);

interface Edge {
  file: string; // importer, relative to the root
  line: number;
  spec: string;
  target: string; // imported file (or path, when it resolves to no source file), relative to the root
  typeOnly: boolean;
}

const ROOT = path.resolve(__dirname, '..');
const rel = (p: string): string => path.relative(ROOT, p).split(path.sep).join('/');

/** The unit (top-level folder, or top-level file) a root-relative path belongs to. */
function unitOf(file: string): string {
  return file.split('/')[0]!;
}

const rank = new Map<string, number>();
LAYERS.forEach((units, i) => units.forEach((u) => rank.set(u, i)));

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name.startsWith('.') || SKIP_DIRS.has(name)) continue;
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) out.push(...sourceFiles(full));
    else if (EXTENSIONS.some((e) => name.endsWith(e)) && !name.endsWith('.d.ts')) out.push(full);
  }
  return out;
}

/** The source file a relative specifier names, as TypeScript's node16 resolution would find it. */
function resolve(fromFile: string, spec: string): string {
  const base = path.resolve(path.dirname(fromFile), spec);
  const stem = base.replace(/\.(c|m)?js$/, '');
  const candidates = [base, ...EXTENSIONS.map((e) => stem + e), ...EXTENSIONS.map((e) => path.join(base, 'index' + e))];
  for (const c of candidates) if (existsSync(c) && statSync(c).isFile()) return c;
  return base;
}

function importsOf(file: string): Edge[] {
  const text = readFileSync(file, 'utf8');
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const edges: Edge[] = [];
  const add = (node: ts.Node, spec: string, typeOnly: boolean): void => {
    if (!spec.startsWith('.')) return; // a package
    const line = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
    edges.push({ file: rel(file), line, spec, target: rel(resolve(file, spec)), typeOnly });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const c = node.importClause;
      // Type-only: `import type …`, or only `{ type A, type B }` (elided at run time); a bare `import './x'` runs it.
      const typeOnly =
        !!c &&
        (c.isTypeOnly ||
          (!c.name &&
            !!c.namedBindings &&
            ts.isNamedImports(c.namedBindings) &&
            c.namedBindings.elements.length > 0 &&
            c.namedBindings.elements.every((e) => e.isTypeOnly)));
      add(node, node.moduleSpecifier.text, typeOnly);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      const typeOnly =
        node.isTypeOnly ||
        (!!node.exportClause &&
          ts.isNamedExports(node.exportClause) &&
          node.exportClause.elements.length > 0 &&
          node.exportClause.elements.every((e) => e.isTypeOnly));
      add(node, node.moduleSpecifier.text, typeOnly);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      add(node, node.moduleReference.expression.text, node.isTypeOnly);
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      add(node, node.argument.literal.text, true); // `import('./x').T` in a type
    } else if (ts.isCallExpression(node) && node.arguments.length > 0 && ts.isStringLiteral(node.arguments[0]!)) {
      const callee = node.expression;
      const isRequire = ts.isIdentifier(callee) && callee.text === 'require';
      const isResolve =
        ts.isPropertyAccessExpression(callee) &&
        ts.isIdentifier(callee.expression) &&
        callee.expression.text === 'require' &&
        callee.name.text === 'resolve';
      if (callee.kind === ts.SyntaxKind.ImportKeyword || isRequire || isResolve)
        add(node, node.arguments[0].text, false);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return edges;
}

/** Strongly connected components with more than one member (Tarjan): the import loops. */
function loops(nodes: Iterable<string>, next: (n: string) => Iterable<string>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const strong = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next(v)) {
      if (!index.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      for (let w = stack.pop()!; ; w = stack.pop()!) {
        onStack.delete(w);
        scc.push(w);
        if (w === v) break;
      }
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const n of nodes) if (!index.has(n)) strong(n);
  return out;
}

function main(): void {
  const quiet = process.argv.includes('--quiet');
  const problems: string[] = [];

  // Every source file of the project must belong to a declared unit, so a new folder gets a place in LAYERS.
  const files = sourceFiles(ROOT).map(rel);
  const checked = files.filter((f) => {
    if (rank.has(unitOf(f))) return true;
    // Top-level tool configs (vitest.config.mts, …) are not part of the program.
    if (!f.includes('/') && /\.config\.[cm]?ts$/.test(f)) return false;
    problems.push(`${f}: not in any layer (add its folder or file to LAYERS in scripts/check-layers.ts)`);
    return false;
  });

  const edges = checked.flatMap((f) => importsOf(path.join(ROOT, f)));
  const units = LAYERS.flat();

  // The folder table: rows import columns; "n" imports, "+t" of them type-only.
  const table = new Map<string, { all: number; types: number }>();
  for (const e of edges) {
    const from = unitOf(e.file);
    const to = unitOf(e.target);
    if (from === to) continue;
    const key = `${from}\u0000${to}`;
    const cell = table.get(key) ?? { all: 0, types: 0 };
    cell.all++;
    if (e.typeOnly) cell.types++;
    table.set(key, cell);
  }
  if (!quiet) {
    const width = Math.max(...units.map((u) => u.length)) + 1;
    const col = 11;
    console.log(
      'Imports between folders (row imports column; "n/t": n imports, t of them type-only), lowest layer first:',
    );
    console.log(''.padEnd(width) + units.map((u) => u.padStart(col)).join(''));
    for (const from of units) {
      const cells = units.map((to) => {
        const c = table.get(`${from}\u0000${to}`);
        return (from === to ? '·' : c ? (c.types ? `${c.all}/${c.types}` : `${c.all}`) : '').padStart(col);
      });
      console.log(from.padEnd(width) + cells.join(''));
    }
    console.log(`Layers, lowest first: ${LAYERS.map((l) => l.join(' ')).join(' → ')}`);
  }

  // Upward imports, and code imports where only types may be.
  for (const e of edges) {
    const from = unitOf(e.file);
    const to = unitOf(e.target);
    const rf = rank.get(from);
    const rt = rank.get(to);
    if (rt === undefined) {
      problems.push(`${e.file}:${e.line}: imports '${e.spec}', which is outside every layer`);
      continue;
    }
    if (rf === undefined) continue;
    if (rt > rf) {
      problems.push(
        `${e.file}:${e.line}: imports '${e.spec}' (${to}, layer ${rt}) from ${from} (layer ${rf}): upward${e.typeOnly ? ' (type-only imports count too)' : ''}`,
      );
      continue;
    }
    const rule = TYPE_ONLY.find((r) => r.from === from && r.to.includes(to));
    if (rule && !e.typeOnly)
      problems.push(`${e.file}:${e.line}: imports code from '${e.spec}' (rule ${rule.name}: ${rule.why})`);
  }

  // Loops between folders, then between files (type-only imports count toward a loop).
  const unitNext = new Map<string, Set<string>>();
  for (const e of edges) {
    const from = unitOf(e.file);
    const to = unitOf(e.target);
    if (from !== to) unitNext.set(from, (unitNext.get(from) ?? new Set()).add(to));
  }
  for (const scc of loops(unitNext.keys(), (u) => unitNext.get(u) ?? [])) {
    const members = new Set(scc);
    // Name the imports that close the loop: those that go upward or sideways in LAYERS.
    const inLoop = edges.filter(
      (e) => unitOf(e.file) !== unitOf(e.target) && members.has(unitOf(e.file)) && members.has(unitOf(e.target)),
    );
    const closing = inLoop.filter((e) => (rank.get(unitOf(e.target)) ?? 0) >= (rank.get(unitOf(e.file)) ?? 0));
    const via = (closing.length ? closing : inLoop).map((e) => `${e.file}:${e.line} imports '${e.spec}'`);
    problems.push(`import loop between folders ${scc.join(', ')}, closed by: ${via.join('; ')}`);
  }
  const fileNext = new Map<string, Set<string>>();
  for (const e of edges) fileNext.set(e.file, (fileNext.get(e.file) ?? new Set()).add(e.target));
  for (const scc of loops(fileNext.keys(), (f) => fileNext.get(f) ?? [])) {
    const members = new Set(scc);
    const via = edges
      .filter((e) => members.has(e.file) && members.has(e.target))
      .map((e) => `${e.file}:${e.line} imports '${e.spec}'`);
    problems.push(`import loop between files ${scc.join(', ')}: ${via.join('; ')}`);
  }

  if (problems.length) {
    console.error(`check-layers: ${problems.length} problem(s):`);
    for (const p of problems) console.error(`  ${p}`);
    process.exit(1);
  }
  console.log(`check-layers: ${checked.length} files, ${edges.length} relative imports, no upward import, no loop.`);
}

main();

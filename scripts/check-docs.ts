/**
 * The docs check (part of `npm run lint`): README.md is the first screen, so it stays short and
 * points to every page of docs/; and what the docs claim about the tree stays true. It exits 1
 * naming the file when
 *  - README.md has more than MAX_README_LINES lines (move the detail to a page of docs/), or
 *  - a docs/*.md page is not linked from README.md (a page nobody can find from the front door), or
 *  - README.md links to a docs/ page that does not exist, or
 *  - a test/*.test.ts file is not named in docs/development.md (which lists every test file), or
 *  - docs/saga.md or docs/decisions.md give the happy path's workflow tasks and history events
 *    ("three workflow tasks (25 history events)") other than the recorded happy path counts
 *    (scripts/happy-path.ts), or docs/saga.md gives none.
 *
 * A link is a Markdown link whose target is `docs/<page>.md`, optionally with an `#anchor`.
 *
 * Usage: tsx scripts/check-docs.ts
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { happyPathCounts } from './happy-path';

const MAX_README_LINES = 150;

const ROOT = path.resolve(__dirname, '..');
const README = path.join(ROOT, 'README.md');
const DOCS = path.join(ROOT, 'docs');
const TESTS = path.join(ROOT, 'test');
const DEVELOPMENT = 'docs/development.md';

const NUMBER_WORDS = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'];
const asNumber = (word: string): number =>
  /^\d+$/.test(word) ? Number(word) : NUMBER_WORDS.indexOf(word.toLowerCase());

/** A test file the list in docs/development.md does not name. */
function unlistedTests(): string[] {
  const listed = readFileSync(path.join(ROOT, DEVELOPMENT), 'utf8');
  return readdirSync(TESTS)
    .filter((name) => name.endsWith('.test.ts'))
    .sort()
    .filter((name) => !listed.includes(`test/${name}`))
    .map((name) => `${DEVELOPMENT}: does not list test/${name} (add it, with what it covers)`);
}

/** The happy path's figures in the pages that give them, against the recorded happy path. */
function happyPathFigures(): string[] {
  const problems: string[] = [];
  const { workflowTasks, events } = happyPathCounts();
  for (const page of ['docs/saga.md', 'docs/decisions.md']) {
    const text = readFileSync(path.join(ROOT, page), 'utf8').replace(/\s+/g, ' ');
    const figures = [...text.matchAll(/\b(\w+) workflow tasks?(?: \(|, )(\d+) (?:history )?events/g)];
    if (figures.length === 0 && page === 'docs/saga.md')
      problems.push(`${page}: gives no figure for the happy path ("N workflow tasks (M history events)")`);
    for (const [said, tasks, evts] of figures)
      if (asNumber(tasks!) !== workflowTasks || Number(evts) !== events)
        problems.push(
          `${page}: says "${said}"; the recorded happy path has ${workflowTasks} workflow tasks and ${events} events (scripts/happy-path.ts)`,
        );
  }
  return problems;
}

function main(): void {
  const problems: string[] = [];
  const text = readFileSync(README, 'utf8');

  // Lines as `wc -l` counts them, without a last empty line after the final newline.
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  if (lines > MAX_README_LINES)
    problems.push(
      `README.md: ${lines} lines, at most ${MAX_README_LINES} (move the detail to a page of docs/ and link it)`,
    );

  const linked = new Set<string>();
  for (const m of text.matchAll(/\]\(\s*(?:\.\/)?docs\/([^)#\s]+\.md)(?:#[^)\s]*)?\s*\)/g)) linked.add(m[1]!);

  const pages = readdirSync(DOCS)
    .filter((name) => name.endsWith('.md'))
    .sort();
  for (const page of pages)
    if (!linked.has(page)) problems.push(`docs/${page}: not linked from README.md (add it to README's Documentation)`);
  for (const page of [...linked].sort())
    if (!existsSync(path.join(DOCS, page))) problems.push(`README.md: links to docs/${page}, which does not exist`);

  problems.push(...unlistedTests(), ...happyPathFigures());

  if (problems.length) {
    console.error(`check-docs: ${problems.length} problem(s):`);
    for (const p of problems) console.error(`  ${p}`);
    process.exit(1);
  }
  console.log(
    `check-docs: README.md has ${lines} lines (at most ${MAX_README_LINES}), links all ${pages.length} docs/ pages; ` +
      `${DEVELOPMENT} lists every test file; the happy path's figures match its recorded history.`,
  );
}

main();

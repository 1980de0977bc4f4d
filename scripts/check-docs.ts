/**
 * The docs check (part of `npm run lint`): README.md is the first screen, so it stays short and
 * points to every page of docs/. It exits 1 naming the file when
 *  - README.md has more than MAX_README_LINES lines (move the detail to a page of docs/), or
 *  - a docs/*.md page is not linked from README.md (a page nobody can find from the front door), or
 *  - README.md links to a docs/ page that does not exist.
 *
 * A link is a Markdown link whose target is `docs/<page>.md`, optionally with an `#anchor`.
 *
 * Usage: tsx scripts/check-docs.ts
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const MAX_README_LINES = 150;

const ROOT = path.resolve(__dirname, '..');
const README = path.join(ROOT, 'README.md');
const DOCS = path.join(ROOT, 'docs');

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

  if (problems.length) {
    console.error(`check-docs: ${problems.length} problem(s):`);
    for (const p of problems) console.error(`  ${p}`);
    process.exit(1);
  }
  console.log(
    `check-docs: README.md has ${lines} lines (at most ${MAX_README_LINES}), links all ${pages.length} docs/ pages.`,
  );
}

main();

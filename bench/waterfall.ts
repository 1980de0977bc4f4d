/** The trace bench's outputs: a waterfall (SVG, the style of chart.ts) of one order's spans, and its time table. */
import { CATEGORIES, type Category, type TraceResult } from './trace-model';

const COLORS: Record<Category, string> = {
  'workflow tasks': '#1f77b4',
  'activity dispatch': '#ff7f0e',
  SQL: '#2ca02c',
  provider: '#d62728',
  waiting: '#999999',
};
/** A span that only contains others (the order, the workflow run, an activity's scheduling). */
const CONTAINER = '#c7c7c7';

const escape = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const ms = (v: number): string => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

/** A round step for the ms axis: about 8 ticks over `total`. */
function tickStep(total: number): number {
  const raw = Math.max(total, 1) / 8;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? 10 * p;
}

/**
 * One bar per span, in tree order, its label (service, name, ms) indented by depth on the left, the
 * bar on a shared ms axis from the order's start; coloured by the category its time counts under.
 */
export function renderWaterfall(trace: TraceResult, title: string): string {
  const rowH = 18;
  const labelW = 460;
  const chartW = 720;
  const left = labelW + 20;
  const top = 60;
  const total = Math.max(trace.totalMs, ...trace.spans.map((s) => s.startMs + s.durationMs), 1);
  const x = (v: number): number => left + (v / total) * chartW;
  const height = top + trace.spans.length * rowH + 70;
  const width = left + chartW + 30;
  const out: string[] = [];
  out.push(
    `<text x="${width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">${escape(title)}</text>`,
  );
  const step = tickStep(total);
  for (let t = 0; t <= total + 1e-9; t += step) {
    out.push(`<line x1="${x(t)}" x2="${x(t)}" y1="${top - 6}" y2="${top + trace.spans.length * rowH}" stroke="#ddd"/>`);
    out.push(`<text x="${x(t)}" y="${top - 10}" text-anchor="middle" font-size="11">${Math.round(t)}</text>`);
  }
  out.push(`<text x="${left + chartW}" y="${top - 26}" text-anchor="end" font-size="11" fill="#555">ms</text>`);
  trace.spans.forEach((s, i) => {
    const y = top + i * rowH;
    if (i % 2 === 1) out.push(`<rect x="0" y="${y}" width="${width}" height="${rowH}" fill="#f6f6f6"/>`);
    const label = `${s.name} — ${ms(s.durationMs)} ms`;
    const short = label.length > 70 - s.depth * 2 ? `${label.slice(0, 67 - s.depth * 2)}…` : label;
    out.push(
      `<text x="${10 + s.depth * 14}" y="${y + 13}" font-size="11"><tspan fill="#777">${escape(s.service.replace(/^order-saga-/, ''))}</tspan> ${escape(short)}</text>`,
    );
    const bx = x(s.startMs);
    const bw = Math.max(1, x(s.startMs + s.durationMs) - bx);
    const color = s.category ? COLORS[s.category] : CONTAINER;
    out.push(
      `<rect x="${bx.toFixed(1)}" y="${y + 3}" width="${bw.toFixed(1)}" height="${rowH - 6}" fill="${color}"><title>${escape(`${s.service}: ${s.name} (${s.kind}) at ${ms(s.startMs)} ms, ${ms(s.durationMs)} ms`)}</title></rect>`,
    );
  });
  const ly = top + trace.spans.length * rowH + 24;
  const legend = [...CATEGORIES.filter((c) => c !== 'waiting'), 'contains others' as const];
  legend.forEach((c, i) => {
    const color = c === 'contains others' ? CONTAINER : COLORS[c];
    out.push(
      `<rect x="${20 + i * 170}" y="${ly}" width="14" height="14" fill="${color}"/><text x="${40 + i * 170}" y="${ly + 12}" font-size="13">${c}</text>`,
    );
  });
  const split = CATEGORIES.map((c) => `${c} ${ms(trace.byCategory[c])}`).join(' · ');
  out.push(
    `<text x="${width / 2}" y="${ly + 36}" text-anchor="middle" font-size="12" fill="#555">${escape(`${ms(trace.totalMs)} ms end to end: ${split} ms`)}</text>`,
  );
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
${out.join('\n')}
</svg>
`;
}

/** The markdown table of where the milliseconds go: category | ms | share (the categories sum to the total). */
export function formatTimeTable(trace: TraceResult): string {
  const rows = CATEGORIES.map((c) => {
    const v = trace.byCategory[c];
    const share = trace.totalMs > 0 ? (v / trace.totalMs) * 100 : 0;
    return `| ${c} | ${ms(v)} | ${share.toFixed(1)} % |`;
  });
  return [
    '| category | ms | share |',
    '|---|---:|---:|',
    ...rows,
    `| **total** | **${ms(trace.totalMs)}** | 100 % |`,
  ].join('\n');
}

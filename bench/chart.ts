/** A small SVG line chart: throughput and p99 against contention (number of hot SKUs), one line per strategy. */
import type { CellResult, Strategy } from './strategies';

const COLORS: Record<Strategy, string> = {
  naive: '#999999',
  'for-update-logic-in-tx': '#d62728',
  'for-update-short': '#1f77b4',
  cas: '#ff7f0e',
  adaptive: '#2ca02c',
};

function panel(
  cells: CellResult[],
  pick: (c: CellResult) => number,
  title: string,
  unit: string,
  x0: number,
  log: boolean,
): string {
  const w = 460;
  const h = 300;
  const left = x0 + 60;
  const top = 50;
  const skus = [...new Set(cells.map((c) => c.skus))].sort((a, b) => a - b);
  const values = cells.map(pick);
  const max = Math.max(1, ...values);
  const min = log ? Math.max(1, Math.min(...values.filter((v) => v > 0))) : 0;
  const y = (v: number): number => {
    if (!log) return top + h - (v / max) * h;
    const lv = Math.log10(Math.max(v, min));
    return top + h - ((lv - Math.log10(min)) / Math.max(1e-9, Math.log10(max) - Math.log10(min))) * h;
  };
  const x = (i: number): number => left + (skus.length === 1 ? w / 2 : (i / (skus.length - 1)) * w);
  const out: string[] = [];
  out.push(
    `<text x="${left + w / 2}" y="${top - 20}" text-anchor="middle" font-size="16" font-weight="bold">${title}</text>`,
  );
  out.push(`<rect x="${left}" y="${top}" width="${w}" height="${h}" fill="none" stroke="#333"/>`);
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    const v = log ? 10 ** (Math.log10(min) + t * (Math.log10(max) - Math.log10(min))) : t * max;
    const yy = y(v);
    out.push(`<line x1="${left}" x2="${left + w}" y1="${yy}" y2="${yy}" stroke="#ddd"/>`);
    out.push(`<text x="${left - 6}" y="${yy + 4}" text-anchor="end" font-size="11">${Math.round(v)}</text>`);
  }
  skus.forEach((s, i) =>
    out.push(
      `<text x="${x(i)}" y="${top + h + 18}" text-anchor="middle" font-size="12">${s} SKU${s === 1 ? '' : 's'}</text>`,
    ),
  );
  out.push(
    `<text x="${left + w / 2}" y="${top + h + 38}" text-anchor="middle" font-size="12">hot SKUs (fewer = more contention)</text>`,
  );
  out.push(
    `<text x="${x0 + 14}" y="${top + h / 2}" text-anchor="middle" font-size="12" transform="rotate(-90 ${x0 + 14} ${top + h / 2})">${unit}${log ? ' (log)' : ''}</text>`,
  );
  for (const strategy of Object.keys(COLORS) as Strategy[]) {
    const pts = skus
      .map((s, i) => {
        const c = cells.find((k) => k.strategy === strategy && k.skus === s);
        return c ? `${x(i)},${y(pick(c))}` : undefined;
      })
      .filter(Boolean);
    if (pts.length === 0) continue;
    out.push(`<polyline fill="none" stroke="${COLORS[strategy]}" stroke-width="2.5" points="${pts.join(' ')}"/>`);
    for (const p of pts) {
      const [px, py] = p!.split(',');
      out.push(`<circle cx="${px}" cy="${py}" r="4" fill="${COLORS[strategy]}"/>`);
    }
  }
  return out.join('\n');
}

export function renderChart(cells: CellResult[], subtitle: string): string {
  const legend = (Object.keys(COLORS) as Strategy[])
    .map(
      (s, i) =>
        `<rect x="${70 + i * 200}" y="425" width="14" height="14" fill="${COLORS[s]}"/><text x="${90 + i * 200}" y="437" font-size="13">${s}</text>`,
    )
    .join('\n');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="1140" height="490" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="570" y="478" text-anchor="middle" font-size="13" fill="#555">${subtitle}</text>
${panel(cells, (c) => c.throughput, 'Throughput (units/s)', 'units/s', 0, false)}
${panel(cells, (c) => c.p99, 'p99 latency (ms)', 'ms', 580, true)}
${legend}
</svg>
`;
}

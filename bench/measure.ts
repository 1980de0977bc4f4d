/**
 * The bench's measuring helpers, shared by its sections: percentiles, concurrent loops, and its two
 * outputs — `say` writes the report (stdout), `progress` the one line that says what runs now (stderr,
 * redrawn in place on a terminal). The percentile and the loops are the load generator's own, so the
 * bench and `client.ts load` count alike.
 */
import { percentile } from '../orders/load';

export { concurrentLoops, percentile } from '../orders/load';

/** One line of the report, on stdout. */
export const say = (s: string): void => void process.stdout.write(`${s}\n`);

/** What runs now, on stderr: one line redrawn on a terminal, a line each elsewhere; `''` clears it. */
export const progress = (s: string): void =>
  void process.stderr.write(process.stderr.isTTY ? `\r\x1b[K${s}` : `${s}\n`);

/** The median of numbers in any order. */
export function median(xs: number[]): number {
  return percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );
}

/** `a` over `b`, to two decimals. */
export function ratio(a: number, b: number): number {
  return Math.round((a / b) * 100) / 100;
}

/**
 * CPU time by process, from /proc (Linux): what a process and its descendants have used so far, in
 * ms. A process's own user + system time, plus what its waited-for children used (cutime, cstime: a
 * Postgres backend that exited), plus the same of its live descendants. Two readings around a run,
 * divided by the orders it completed, give CPU-ms per order for that process tree.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ; 100 on every Linux this runs on). */
const TICKS_PER_SECOND = 100;

interface Stat {
  pid: number;
  ppid: number;
  /** utime + stime + cutime + cstime, in ticks. */
  ticks: number;
}

function readStat(pid: number): Stat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined; // gone meanwhile
  }
  // The command name (field 2) is in parentheses and may hold spaces: the fields start after its ')'.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state); field N is rest[N - 3].
  const field = (n: number): number => Number(rest[n - 3]);
  return { pid, ppid: field(4), ticks: field(14) + field(15) + field(16) + field(17) };
}

/** Every live process's stat, once. */
function snapshot(): Stat[] {
  const out: Stat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = readStat(Number(name));
    if (s) out.push(s);
  }
  return out;
}

/** Whether CPU time can be read here (/proc exists). */
export const cpuReadable = (): boolean => readStat(process.pid) !== undefined;

/**
 * CPU-ms used so far by each named process tree (the process and every live descendant, with what
 * their reaped children used). A descendant that is itself one of the roots counts for its own name
 * only (the bench process starts the dev server and the provider: they are not the worker's). A pid
 * that is gone reads 0.
 */
export function cpuMsByTree(roots: Record<string, number>): Record<string, number> {
  const all = snapshot();
  const children = new Map<number, Stat[]>();
  for (const s of all) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s]);
  const byPid = new Map(all.map((s) => [s.pid, s]));
  const rootPids = new Set(Object.values(roots));
  const treeTicks = (pid: number): number => {
    const own = byPid.get(pid)?.ticks ?? 0;
    const kids = (children.get(pid) ?? []).filter((c) => !rootPids.has(c.pid));
    return own + kids.reduce((a, c) => a + treeTicks(c.pid), 0);
  };
  return Object.fromEntries(
    Object.entries(roots).map(([name, pid]) => [name, (treeTicks(pid) * 1000) / TICKS_PER_SECOND]),
  );
}

/** What each tree used between two readings, per `count` (orders): CPU-ms per order, one decimal. */
export function cpuMsPer(
  before: Record<string, number>,
  after: Record<string, number>,
  count: number,
): Record<string, number> {
  return Object.fromEntries(
    Object.keys(after).map((k) => [k, Math.round(((after[k]! - (before[k] ?? 0)) / count) * 10) / 10]),
  );
}

/** The sum of a per-order reading's processes. */
export const cpuTotal = (perOrder: Record<string, number>): number =>
  Math.round(Object.values(perOrder).reduce((a, b) => a + b, 0) * 10) / 10;

/** The first descendant of `root` whose command line matches `pattern` (the SDK's dev server, say). */
export function findDescendant(root: number, pattern: RegExp): number | undefined {
  const all = snapshot();
  const below = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const s of all)
      if (below.has(s.ppid) && !below.has(s.pid)) {
        below.add(s.pid);
        grew = true;
      }
  }
  for (const pid of below) {
    if (pid === root) continue;
    let cmd: string;
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
    } catch {
      continue;
    }
    if (pattern.test(cmd)) return pid;
  }
  return undefined;
}

/** The postmaster's pid of the Postgres server on `dataDir` (the first line of its postmaster.pid). */
export function postmasterPid(dataDir: string): number {
  const pid = Number(readFileSync(`${dataDir}/postmaster.pid`, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no postmaster pid in ${dataDir}/postmaster.pid`);
  return pid;
}

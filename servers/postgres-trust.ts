/**
 * What the embedded Postgres (servers/postgres.ts) trusts on disk: which paths the server's user can
 * reach, and the directories it creates or accepts (owner, mode, a parent nobody else can rename them
 * out of). Anything else is refused with an UntrustedPathError that names the path and what to do.
 */
import { chmodSync, lchownSync, lstatSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * As root the server runs as the `postgres` user, which can only use paths whose every parent
 * directory others may enter. A clone under a private directory (mode 0700) is not one of those, so
 * the binaries, a password file, and (when needed) the data move under this shared base instead.
 * It lives in a world-writable place (/var/tmp), so nothing found there is trusted: see ownedDir.
 */
export const SHARED_BASE = '/var/tmp/order-saga-postgres';

/** True when a user other than the owner may reach `p` (every parent directory has o+x). */
export function reachableByOthers(p: string): boolean {
  for (let dir = path.dirname(path.resolve(p)); ; dir = path.dirname(dir)) {
    try {
      if ((statSync(dir).mode & 0o001) === 0) return false;
    } catch {
      return false;
    }
    if (dir === path.dirname(dir)) return true;
  }
}

/** A refusal to use something another user could have planted; the message says what to do. */
export class UntrustedPathError extends Error {
  constructor(what: string, why: string, fix: string) {
    super(`refusing to use ${what}: ${why}; ${fix}`);
    this.name = 'UntrustedPathError';
  }
}

/** A mode as `ls` and chmod write it: 0755. */
export const octal = (mode: number): string => (mode & 0o7777).toString(8).padStart(4, '0');

/**
 * Creates `dir` (one level, never following a symbolic link), or accepts an existing one only when
 * it is a real directory owned by `uid` with exactly `mode`, in a parent that others cannot rename it
 * out of (not writable by others, or sticky like /var/tmp). Anything else is refused, untouched.
 */
export function ownedDir(dir: string, mode: number, owner: { uid: number; gid?: number }): string {
  const parent = lstatSync(path.dirname(dir));
  if ((parent.mode & 0o022) !== 0 && (parent.mode & 0o1000) === 0) {
    throw new UntrustedPathError(
      dir,
      `its parent ${path.dirname(dir)} is writable by others and not sticky`,
      'choose another place',
    );
  }
  if (parent.uid !== 0 && parent.uid !== process.getuid?.()) {
    throw new UntrustedPathError(
      dir,
      `its parent ${path.dirname(dir)} belongs to uid ${parent.uid}, who could move it (this runs as uid ${process.getuid?.()})`,
      "choose a place whose parent is yours or root's (PG_DATA_DIR, PG_SHARED_DIR)",
    );
  }
  const fix = `remove it if you did not create it (rm -rf ${dir}), then start again`;
  try {
    mkdirSync(dir, { mode });
    chmodSync(dir, mode); // we created it just now; the umask must not decide its mode
    if (owner.uid !== process.getuid?.()) lchownSync(dir, owner.uid, owner.gid ?? owner.uid);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const st = lstatSync(dir);
  if (st.isSymbolicLink()) throw new UntrustedPathError(dir, 'it is a symbolic link', fix);
  if (!st.isDirectory()) throw new UntrustedPathError(dir, 'it is not a directory', fix);
  if (st.uid !== owner.uid) throw new UntrustedPathError(dir, `it is owned by uid ${st.uid}, not ${owner.uid}`, fix);
  if ((st.mode & 0o7777) !== mode)
    throw new UntrustedPathError(dir, `its mode is ${octal(st.mode)}, not ${octal(mode)}`, fix);
  return dir;
}

/** root, the owner of what the shared base holds for the server's user. */
export const ROOT_OWNER = { uid: 0, gid: 0 };

/** Each path under `base` (its parts created with ownedDir, root's, mode 0755). */
export function sharedDir(base: string, ...parts: string[]): string {
  let dir = ownedDir(base, 0o755, ROOT_OWNER);
  for (const part of parts) dir = ownedDir(path.join(dir, part), 0o755, ROOT_OWNER);
  return dir;
}

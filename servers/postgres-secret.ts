/**
 * The embedded Postgres's superuser password: random per data directory, kept in a file beside it
 * that only its owner may read, and handed to initdb in a file of its own that is removed after.
 */
import { closeSync, fchownSync, lstatSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { octal, sharedDir, UntrustedPathError } from './postgres-trust';

/** Where a data directory's superuser password is kept: beside it, readable by its owner only. */
export const secretFile = (dataDir: string): string =>
  path.join(path.dirname(dataDir), `.${path.basename(dataDir)}.superuser`);

/**
 * Writes the password beside `file`, in a new file of its own (never through an existing file or a
 * planted link); `commit()` then puts it in place in one rename. Between the two, the server's
 * password can be changed: a failure before leaves the old file, a failure after the new one.
 */
export function stageSecret(file: string, password: string): { commit(): void; abandon(): void } {
  const staged = `${file}.${randomBytes(6).toString('hex')}.new`;
  const fd = openSync(staged, 'wx', 0o600);
  try {
    writeSync(fd, `${password}\n`);
  } finally {
    closeSync(fd);
  }
  return { commit: () => renameSync(staged, file), abandon: () => rmSync(staged, { force: true }) };
}

/** The password, when the file is ours alone: a regular file of this user's, mode 0600. */
export function readSecret(file: string): string | undefined {
  let st;
  try {
    st = lstatSync(file);
  } catch {
    return undefined;
  }
  const fix = 'make it a regular file of yours, mode 0600 (chown, chmod 600)';
  if (!st.isFile()) throw new UntrustedPathError(file, 'it is not a regular file', fix);
  if (st.uid !== process.getuid?.()) throw new UntrustedPathError(file, `it is owned by uid ${st.uid}`, fix);
  if ((st.mode & 0o077) !== 0)
    throw new UntrustedPathError(file, `others may read or write it (mode ${octal(st.mode)})`, fix);
  return readFileSync(file, 'utf8').trim();
}

/**
 * Writes the password for initdb's --pwfile into a new file (never an existing file, nor a planted
 * link) under the shared base, or the temporary directory without one, readable by the server's user
 * alone; its path. The caller removes it once initdb has run.
 */
export function initdbPasswordFile(
  password: string,
  shared: string | undefined,
  user: { uid: number; gid: number } | undefined,
): string {
  const pwfile = path.join(shared ? sharedDir(shared) : os.tmpdir(), `order-saga-pw-${randomBytes(8).toString('hex')}`);
  const fd = openSync(pwfile, 'wx', 0o600); // never an existing file, nor a planted link
  try {
    writeSync(fd, `${password}\n`);
    if (user) fchownSync(fd, user.uid, user.gid);
  } finally {
    closeSync(fd);
  }
  return pwfile;
}

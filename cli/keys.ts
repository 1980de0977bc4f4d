/** `keys`: the payload encryption keys' IDs and which one is current, never the keys; `keys rotate`. */
import path from 'node:path';
import type { Command } from '@commander-js/extra-typings';
import { DEFAULT_KEY_FILE, requirePayloadKeys, rotateKeyFile } from '../platform/payload-codec';
import { CliError, EXIT, type CliContext } from './context';
import { jsonOption } from './options';

/** `keys`: the payload keys this process would use; `keys rotate`: a new current key in the key file. */
function keys(action: string | undefined, opts: { json?: boolean }, ctx: CliContext): number {
  const { io } = ctx;
  if (action !== undefined && action !== 'rotate')
    throw new CliError(`keys: unknown action "${action}" (expected nothing, to list, or "rotate")`, EXIT.invalid);
  try {
    if (action === 'rotate') {
      if (process.env.PAYLOAD_KEYS?.trim())
        throw new CliError(
          'keys rotate changes the key file, but PAYLOAD_KEYS is set: add the new key at the front of PAYLOAD_KEYS instead (docs: SECURITY.md)',
          EXIT.notCompleted,
        );
      const file = process.env.PAYLOAD_KEY_FILE ? path.resolve(process.env.PAYLOAD_KEY_FILE) : DEFAULT_KEY_FILE;
      const r = rotateKeyFile(file);
      if (opts.json) io.out(JSON.stringify({ file, ...r }));
      else {
        io.out(`new current key ${r.current} in ${file} (${r.count} keys; ${r.previous} and older ones still decode)`);
        io.out('restart the workers, the codec server (npm start) and any long-lived client so they seal with it');
      }
      return EXIT.ok;
    }
    const k = requirePayloadKeys();
    const ids = [...k.keys.keys()];
    if (opts.json) io.out(JSON.stringify({ source: k.source, current: k.current, keys: ids }));
    else io.out(`payload keys from ${k.source}: current ${k.current}; can decode ${ids.join(', ')}`);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError((err as Error).message, EXIT.notCompleted);
  }
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('keys')
    .summary("the payload encryption keys' IDs; rotate: a new current key")
    .description(
      'Without an action: the IDs of the payload keys this process has (from PAYLOAD_KEYS, PAYLOAD_KEY_FILE or .data/payload-keys.json) and which one is current; never the keys themselves. "keys rotate": adds a new key to the key file and makes it current; the old keys stay, so every payload they sealed still decodes. Processes read the file when they start.',
    )
    .argument('[action]', 'rotate')
    .addOption(jsonOption())
    .action((action: string | undefined, opts) => ctx.done(keys(action, opts, ctx)));
}

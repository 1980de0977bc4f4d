/** `api-keys`: the orders API's keys, one per storefront: create (printed once), list, revoke. */
import type { Command } from '@commander-js/extra-typings';
import { CliError, EXIT, type CliContext } from './context';
import { idArg, jsonOption } from './options';

async function apiKeys(
  action: 'create' | 'list' | 'revoke',
  arg: { storefront?: string; keyId?: string },
  opts: { json?: boolean },
  ctx: CliContext,
): Promise<number> {
  const { io } = ctx;
  const store = ctx.needStore('app', `api-keys ${action}`);
  try {
    if (action === 'create') {
      const made = await store.createApiKey(arg.storefront!);
      if (opts.json) io.out(JSON.stringify({ storefront: arg.storefront, ...made }));
      else {
        io.out(`key ${made.keyId} for storefront ${arg.storefront} (shown once; only its hash is kept):`);
        io.out(made.key);
      }
      return EXIT.ok;
    }
    if (action === 'revoke') {
      if (!(await store.revokeApiKey(arg.keyId!)))
        throw new CliError(`api-keys revoke: keyId: no key ${arg.keyId} in use`, EXIT.notCompleted);
      io.out(opts.json ? JSON.stringify({ keyId: arg.keyId, revoked: true }) : `key ${arg.keyId} revoked`);
      return EXIT.ok;
    }
    const keys = await store.listApiKeys();
    if (opts.json) io.out(JSON.stringify(keys));
    else if (!keys.length) io.out('no API keys (client.ts api-keys create <storefront>)');
    else
      for (const k of keys)
        io.out(`${k.keyId}  ${k.storefront}  created ${k.createdAt}${k.revokedAt ? `  revoked ${k.revokedAt}` : ''}`);
    return EXIT.ok;
  } finally {
    await store.close();
  }
}

export function register(cli: Command, ctx: CliContext): void {
  const cmd = cli
    .command('api-keys')
    .summary("the orders API's keys: create, list, revoke")
    .description(
      'The keys storefronts call the orders API with (Authorization: Bearer <key>), one per storefront. Only a hash of each is kept: create prints the key once.',
    );
  cmd
    .command('create')
    .description('makes a key for a storefront and prints it (once)')
    .argument('<storefront>', 'the storefront the key is for', idArg('a storefront name'))
    .addOption(jsonOption('one JSON object: storefront, keyId, key'))
    .action(async (storefront, opts) => ctx.done(await apiKeys('create', { storefront }, opts, ctx)));
  cmd
    .command('list', { isDefault: true })
    .description('every key: its ID, storefront, when made and revoked (never the key)')
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await apiKeys('list', {}, opts, ctx)));
  cmd
    .command('revoke')
    .description('revokes a key by its ID: a request with it is a 401 from then on')
    .argument('<keyId>', "the key's ID (api-keys list)", idArg('a key ID'))
    .addOption(jsonOption())
    .action(async (keyId, opts) => ctx.done(await apiKeys('revoke', { keyId }, opts, ctx)));
}

/**
 * npm start's check of a Temporal it did not start (ops/cluster-check.ts), against a stand-in that
 * answers as Temporal Cloud does (no operator calls): what is missing is named with the commands an
 * operator runs, and nothing is changed; what the server allows is added. The real server's side is
 * in test/mtls.server.test.ts.
 */
import type { Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { describe, expect, it } from 'vitest';
import { checkCluster, ClusterNotReady } from '../ops/cluster-check';

const KEYWORD = temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD;
const INT = temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT;
const denied = (): Promise<never> =>
  Promise.reject(Object.assign(new Error('7 PERMISSION_DENIED: Request unauthorized.'), { code: 7 }));

/** A stand-in server: its namespace, its search attributes (or aliases only, as Cloud), and whether it lets the operator calls through. */
function server(opts: { namespace?: boolean; attrs?: Record<string, number>; aliases?: string[]; operator: boolean }) {
  const added: Record<string, number>[] = [];
  const connection = {
    workflowService: {
      describeNamespace: () =>
        opts.namespace === false
          ? Promise.reject(Object.assign(new Error('5 NOT_FOUND: Namespace x is not found.'), { code: 5 }))
          : Promise.resolve({
              config: {
                customSearchAttributeAliases: Object.fromEntries(
                  (opts.aliases ?? []).map((a, i) => [`Keyword0${i}`, a]),
                ),
              },
            }),
    },
    operatorService: {
      listSearchAttributes: () => (opts.operator ? Promise.resolve({ customAttributes: opts.attrs ?? {} }) : denied()),
      addSearchAttributes: (req: { searchAttributes: Record<string, number> }) =>
        opts.operator ? Promise.resolve(void added.push(req.searchAttributes)) : denied(),
    },
  };
  return { connection: connection as unknown as Connection, added };
}

describe('the check of a cluster npm start did not start', () => {
  it('a missing namespace is named, with how to create it', async () => {
    const { connection } = server({ namespace: false, operator: true });
    await expect(checkCluster(connection, 'shop', 'x:7233 (namespace shop, API key)')).rejects.toThrow(
      /^namespace "shop" does not exist on x:7233 \(namespace shop, API key\): create it \(temporal operator namespace create --namespace shop/,
    );
  });

  it('search attributes missing where the server refuses to add them: named with the commands, nothing added', async () => {
    const { connection, added } = server({ aliases: ['OrderStatus', 'CustomerId'], operator: false });
    const err = await checkCluster(connection, 'shop.a1b2c', 'cloud').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ClusterNotReady);
    expect((err as ClusterNotReady).refused).toBe(true);
    const message = (err as Error).message;
    expect(message).toContain(
      'search attributes missing on namespace "shop.a1b2c" (cloud): NeedsAttention (Bool), TotalCents (Int)',
    );
    expect(message).toContain('--name NeedsAttention --type Bool --name TotalCents --type Int');
    expect(message).toContain(
      'tcld namespace search-attributes add --namespace shop.a1b2c --search-attribute "NeedsAttention=Bool"',
    );
    expect(added).toEqual([]);
  });

  it('adds what is missing where the server allows it; refuses one of another type', async () => {
    const ok = server({ attrs: { OrderStatus: KEYWORD, CustomerId: KEYWORD }, operator: true });
    expect(await checkCluster(ok.connection, 'default', 'local')).toEqual({ added: ['NeedsAttention', 'TotalCents'] });
    expect(ok.added.map((a) => Object.keys(a))).toEqual([['NeedsAttention', 'TotalCents']]);
    const wrong = server({ attrs: { OrderStatus: INT }, operator: true });
    await expect(checkCluster(wrong.connection, 'default', 'local')).rejects.toThrow(
      /OrderStatus is Int, the saga needs Keyword/,
    );
    expect(wrong.added).toEqual([]);
  });
});

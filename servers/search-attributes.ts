/**
 * The saga's search attributes, registered on any server (the dev server, the real one, the Java
 * time-skipping one). Apart from the dev server's code, so `npm run migrate` does not load the SDK's
 * testing package.
 */
import type { Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { SEARCH_ATTRIBUTES } from '../workflows/search-attributes';

/** Registers the saga's search attributes on a running server (idempotent). */
export async function registerSearchAttributes(connection: Connection, namespace: string): Promise<void> {
  const types = temporal.api.enums.v1.IndexedValueType;
  const searchAttributes: Record<string, temporal.api.enums.v1.IndexedValueType> = {};
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
    searchAttributes[name] =
      type === 'Keyword'
        ? types.INDEXED_VALUE_TYPE_KEYWORD
        : type === 'Bool'
          ? types.INDEXED_VALUE_TYPE_BOOL
          : types.INDEXED_VALUE_TYPE_INT;
  }
  let known: Record<string, unknown> = {};
  try {
    known = (await connection.operatorService.listSearchAttributes({ namespace })).customAttributes ?? {};
  } catch (err) {
    // The Java time-skipping server can add search attributes but cannot list them.
    if ((err as { code?: number }).code !== 12 /* UNIMPLEMENTED */) throw err;
  }
  const missing = Object.fromEntries(Object.entries(searchAttributes).filter(([name]) => !(name in known)));
  if (Object.keys(missing).length === 0) return;
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing });
  } catch (err) {
    if (!/already exists/i.test((err as Error).message)) throw err;
  }
}

/**
 * What the saga needs of a Temporal it did not start (Temporal Cloud, a secured cluster), checked
 * before anything is changed: the namespace exists, and the search attributes are there, added only
 * when the server lets this client add them. Otherwise ClusterNotReady says what is missing and the
 * command an operator runs, and nothing was changed.
 */
import { Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { SEARCH_ATTRIBUTES } from '../workflows/search-attributes';
import type { TemporalProfile } from './temporal-connection';

/** The cluster lacks something this client may not add: the message says what and how to add it. */
export class ClusterNotReady extends Error {
  /** True when the server refused a change (not merely not ready yet): an operator must act. */
  constructor(
    message: string,
    readonly refused = false,
  ) {
    super(message);
  }
}

const GRPC = { NOT_FOUND: 5, PERMISSION_DENIED: 7, UNIMPLEMENTED: 12 } as const;
const code = (err: unknown): number | undefined => (err as { code?: number }).code;

const TYPE_NAMES: Record<number, string> = {
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD]: 'Keyword',
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_BOOL]: 'Bool',
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT]: 'Int',
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_TEXT]: 'Text',
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE]: 'Double',
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_DATETIME]: 'Datetime',
  [temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST]: 'KeywordList',
};
const INDEXED: Record<string, temporal.api.enums.v1.IndexedValueType> = {
  Keyword: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  Bool: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
  Int: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
};

/** The commands that add `names` to `namespace`: a self-hosted cluster's, and Temporal Cloud's. */
export function addSearchAttributesCommands(namespace: string, names: string[]): string[] {
  const pairs = names.map((n) => ({ n, t: SEARCH_ATTRIBUTES[n]! }));
  return [
    `temporal operator search-attribute create --namespace ${namespace} ${pairs.map((p) => `--name ${p.n} --type ${p.t}`).join(' ')}`,
    `tcld namespace search-attributes add --namespace ${namespace} ${pairs.map((p) => `--search-attribute "${p.n}=${p.t}"`).join(' ')}`,
  ];
}

/**
 * Checks the namespace and the saga's search attributes on `where` (a profile's summary, for
 * messages). Missing search attributes are added when the server allows it; `added` names them.
 */
export async function checkCluster(
  connection: Connection,
  namespace: string,
  where: string,
): Promise<{ added: string[] }> {
  let described;
  try {
    described = await connection.workflowService.describeNamespace({ namespace });
  } catch (err) {
    if (code(err) === GRPC.NOT_FOUND)
      throw new ClusterNotReady(
        `namespace "${namespace}" does not exist on ${where}: create it (temporal operator namespace create --namespace ${namespace}; on Temporal Cloud in its web console or with tcld namespace create), or name another with TEMPORAL_NAMESPACE or the profile`,
      );
    if (code(err) === GRPC.PERMISSION_DENIED)
      throw new ClusterNotReady(
        `namespace "${namespace}" on ${where}: this client may not use it (${(err as Error).message})`,
      );
    throw err;
  }
  // Name → type; Temporal Cloud may refuse the operator's list, then the namespace's aliases name them (type unknown).
  let known: Map<string, string | undefined>;
  try {
    const attrs = (await connection.operatorService.listSearchAttributes({ namespace })).customAttributes ?? {};
    known = new Map(Object.entries(attrs).map(([n, t]) => [n, TYPE_NAMES[t]]));
  } catch (err) {
    if (code(err) !== GRPC.PERMISSION_DENIED && code(err) !== GRPC.UNIMPLEMENTED) throw err;
    const aliases = described.config?.customSearchAttributeAliases ?? {};
    known = new Map(Object.values(aliases).map((alias) => [alias, undefined]));
  }
  const wrongType = Object.entries(SEARCH_ATTRIBUTES).filter(
    ([n, t]) => known.has(n) && known.get(n) && known.get(n) !== t,
  );
  if (wrongType.length)
    throw new ClusterNotReady(
      `search attributes of another type on namespace "${namespace}" (${where}): ${wrongType.map(([n, t]) => `${n} is ${known.get(n)}, the saga needs ${t}`).join('; ')}`,
      true,
    );
  const missing = Object.keys(SEARCH_ATTRIBUTES).filter((n) => !known.has(n));
  if (missing.length === 0) return { added: [] };
  try {
    await connection.operatorService.addSearchAttributes({
      namespace,
      searchAttributes: Object.fromEntries(missing.map((n) => [n, INDEXED[SEARCH_ATTRIBUTES[n]!]!])),
    });
  } catch (err) {
    if (/already exists/i.test((err as Error).message)) return { added: [] };
    const [selfHosted, cloud] = addSearchAttributesCommands(namespace, missing);
    throw new ClusterNotReady(
      `search attributes missing on namespace "${namespace}" (${where}): ${missing.map((n) => `${n} (${SEARCH_ATTRIBUTES[n]})`).join(', ')}; ` +
        `this client may not add them (${(err as Error).message.split('\n')[0]}). An operator adds them with:\n  ${selfHosted}\n  or on Temporal Cloud: ${cloud}`,
      true,
    );
  }
  return { added: missing };
}

/**
 * npm start's check of a Temporal named by the profile, before it starts or changes anything: the
 * server answers with this profile, the namespace exists, the search attributes are there (added
 * when allowed). Returns the line to show.
 */
export async function checkExternalTemporal(profile: TemporalProfile): Promise<string> {
  let connection: Connection;
  try {
    connection = await Connection.connect({ ...profile.connection, connectTimeout: '10s' });
    await connection.workflowService.getSystemInfo({});
  } catch (err) {
    throw new ClusterNotReady(`cannot reach Temporal at ${profile.summary}: ${(err as Error).message}`);
  }
  try {
    const { added } = await checkCluster(connection, profile.namespace, profile.summary);
    return `namespace ${profile.namespace} found; search attributes ${added.length ? `added: ${added.join(', ')}` : 'all present'}`;
  } finally {
    await connection.close();
  }
}

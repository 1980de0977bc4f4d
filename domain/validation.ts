/**
 * Shared pieces of the valibot schemas (the order, the provider's requests, the load generator's
 * options) and the one way their failure is reported: the first problem, with the path of the field
 * it is in written `items[1].qty`. Workflow-safe: valibot is plain, deterministic code.
 *
 * Why valibot: domain/order.ts is in the workflow bundle, which Temporal's bundler does not tree-shake,
 * and valibot adds the least to it (the sizes are in docs/decisions.md).
 */
import * as v from 'valibot';

const isRecord = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

/** A JSON object (never an array) with exactly these fields: any other is an unknown field. */
export const record = <const E extends v.ObjectEntries>(entries: E, message: string) =>
  v.pipe(v.custom<Record<string, unknown>>(isRecord, message), v.strictObject(entries, message));

/** `message` for every way a number can fail: a whole number from min to max. */
export const wholeNumber = (min: number, max: number, message = `must be a whole number from ${min} to ${max}`) =>
  v.pipe(v.number(message), v.integer(message), v.minValue(min, message), v.maxValue(max, message));

/** A path item for an issue a check adds below the value it checks (`items[1].sku`). */
export const at = (input: unknown, key: string | number): v.IssuePathItem =>
  ({
    type: typeof key === 'number' ? 'array' : 'object',
    origin: 'value',
    input,
    key,
    value: undefined,
  }) as unknown as v.IssuePathItem;

/** `items`, `1`, `qty` → `items[1].qty`. */
function fieldPath(path: readonly v.IssuePathItem[] | undefined): string {
  return (path ?? []).reduce<string>(
    (s, { key }) => (typeof key === 'number' ? `${s}[${key}]` : s ? `${s}.${String(key)}` : String(key)),
    '',
  );
}

/** What a strict object's own issue means: a key it does not know, or one it misses. */
function problemOf(issue: v.BaseIssue<unknown>): string {
  if (issue.type === 'strict_object' && issue.path) return issue.expected === 'never' ? 'unknown field' : 'is required';
  return issue.message;
}

/**
 * Parses `raw`, or calls `fail` with the first problem: its field (`top` when the value itself is
 * wrong) and what is wrong with it.
 */
export function parseWith<S extends v.GenericSchema>(
  schema: S,
  raw: unknown,
  fail: (field: string, problem: string) => never,
  top = '',
): v.InferOutput<S> {
  const r = v.safeParse(schema, raw, { abortEarly: true });
  if (r.success) return r.output;
  const issue = r.issues[0];
  return fail(fieldPath(issue.path) || top, problemOf(issue));
}

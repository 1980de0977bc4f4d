/** The knobs of one saga, their production defaults, and their schema (workflow-safe). */
import * as v from 'valibot';
import { MAX_LANES } from '../domain/lanes';
import { OrderValidationError } from '../domain/order';
import { parseWith, record, wholeNumber } from '../domain/validation';

const HOUR = 3_600_000;
const YEAR = 365 * 24 * HOUR;
const ms = () => v.optional(wholeNumber(1, YEAR));

/** Every knob is optional in the input; durations are whole milliseconds. */
const SagaConfigSchema = record(
  {
    /** Global saga deadline, read from the workflow clock (no timer on the happy path). */
    deadlineMs: ms(),
    /** How long an UNKNOWN charge is inquired about before it escalates to NEEDS_ATTENTION. */
    unknownEscalationMs: ms(),
    /** First and largest gap between inquiries of an UNKNOWN charge (doubling in between). */
    inquiryBaseMs: ms(),
    inquiryMaxMs: ms(),
    /** How long a step after the pivot retries before it escalates (it never compensates). */
    forwardRetryLimitMs: ms(),
    /** How many serial inventory lanes the worker runs (SKUs hash over them). */
    inventoryLanes: v.optional(wholeNumber(1, MAX_LANES)),
    /** The longest wait between two tries of a compensation (they retry until they succeed). */
    compensationRetryMaxMs: ms(),
  },
  'must be an object',
);

export type SagaConfig = Required<v.InferOutput<typeof SagaConfigSchema>>;

export const DEFAULT_SAGA_CONFIG: SagaConfig = {
  deadlineMs: 24 * HOUR,
  unknownEscalationMs: 6 * HOUR,
  inquiryBaseMs: 5_000,
  inquiryMaxMs: 15 * 60_000,
  forwardRetryLimitMs: 3 * 24 * HOUR,
  inventoryLanes: 2,
  compensationRetryMaxMs: 5 * 60_000,
};

/** The defaults with `raw` over them; errors name the field as `config.<name>` (an OrderValidationError). */
export function parseSagaConfig(raw: unknown): SagaConfig {
  if (raw === undefined || raw === null) return { ...DEFAULT_SAGA_CONFIG };
  const fail = (field: string, problem: string): never => {
    throw new OrderValidationError(field ? `config.${field}` : 'config', problem);
  };
  const given = parseWith(SagaConfigSchema, raw, fail);
  const cfg: SagaConfig = { ...DEFAULT_SAGA_CONFIG };
  for (const [key, value] of Object.entries(given)) if (value !== undefined) cfg[key as keyof SagaConfig] = value;
  if (cfg.inquiryMaxMs < cfg.inquiryBaseMs) fail('inquiryMaxMs', 'must be at least config.inquiryBaseMs');
  return cfg;
}

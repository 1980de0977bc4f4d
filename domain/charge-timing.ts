/**
 * The charge attempt's time limit, shared by the workflow (its startToCloseTimeout) and the worker's
 * startup check (activities/payments.ts: the provider timeout plus the send budget must fit inside
 * it). Here, in domain/, because workflow code may import values from nowhere above it.
 */

/** The startToCloseTimeout of one charge attempt (the workflow's chargeOnceOpts), in milliseconds. */
export const CHARGE_ATTEMPT_TIMEOUT_MS = 15_000;

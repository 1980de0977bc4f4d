/**
 * The payment provider's loopback defaults, in a module that imports nothing, so the processes that
 * talk to the provider (ops/config.ts) read them without loading the provider's server.
 */

/** Development keys, for loopback use only. Set PROVIDER_API_KEY(S) / PROVIDER_ADMIN_KEY(S) anywhere else. */
export const DEV_PROVIDER_API_KEY = 'dev-only-provider-key';
export const DEV_PROVIDER_ADMIN_KEY = 'dev-only-admin-key';

/** PROVIDER_PORT (the payment API) and PROVIDER_ADMIN_PORT (the fault switches) when unset. */
export const PROVIDER_PORT = 4010;
export const PROVIDER_ADMIN_PORT = 4011;

/**
 * PROVIDER_AUTH_EXPIRY_MS when unset: how long an authorization's hold lasts (card holds last about 7
 * days). It must be longer than the saga's way from the hold to its capture (docs/provider.md).
 */
export const DEFAULT_AUTH_EXPIRY_MS = 7 * 24 * 3_600_000;

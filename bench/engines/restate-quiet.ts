/**
 * The Restate SDK's own log in this process: errors only, unless RESTATE_LOGGING says otherwise (it
 * reads the variable when loaded, so this runs before it; it would warn on every request that the
 * endpoint does not check request signatures — it listens on loopback only).
 */
process.env.RESTATE_LOGGING ??= 'ERROR';

export {};

/**
 * This process's Temporal worker identity: the SDK's default (`<pid>@<host>`) with a random suffix, so
 * that no two processes ever share one, not even a container started again with the same PID and
 * hostname, or processes on one host's network. The server lists pollers by it, the sweeper's record of
 * stopped workers names one process by it (worker_stops), and a lane's records name their worker by it.
 */
import { randomBytes } from 'node:crypto';
import os from 'node:os';

export const WORKER_IDENTITY = `${process.pid}@${os.hostname()}/${randomBytes(3).toString('hex')}`;

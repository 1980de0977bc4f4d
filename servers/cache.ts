/** Where the servers' binaries and their build trees are kept (scripts/ensure-servers.sh fills it). */
import os from 'node:os';
import path from 'node:path';

export const CACHE_DIR = process.env.ORDER_SAGA_CACHE ?? path.join(os.homedir(), '.cache', 'order-saga');

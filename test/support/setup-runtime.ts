import { DefaultLogger, Runtime } from '@temporalio/worker';
import { TEST_PAYLOAD_KEYS } from './payload-keys';

// Keep test output readable: the SDK's own logs at ERROR only.
Runtime.install({ logger: new DefaultLogger('ERROR') });

// Every client and worker of the tests (and the processes they start) seal payloads with the test key.
process.env.PAYLOAD_KEYS = TEST_PAYLOAD_KEYS;
delete process.env.PAYLOAD_KEY_FILE;

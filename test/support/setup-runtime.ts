import { installRuntime } from '../../platform/runtime';
import { dropPersonalTemporalConfig } from './hermetic-env';
import { TEST_PAYLOAD_KEYS } from './payload-keys';

// Keep test output readable, so that a failure stands out: the SDK's own logs at ERROR only, here
// and in the worker processes the tests start (WORKER_LOG_LEVEL).
installRuntime('ERROR');
dropPersonalTemporalConfig();
process.env.WORKER_LOG_LEVEL ??= 'ERROR';

// Every client and worker of the tests (and the processes they start) seal payloads with the test key.
process.env.PAYLOAD_KEYS = TEST_PAYLOAD_KEYS;
delete process.env.PAYLOAD_KEY_FILE;

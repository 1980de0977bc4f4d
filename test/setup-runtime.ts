import { DefaultLogger, Runtime } from '@temporalio/worker';

// Keep test output readable: the SDK's own logs at ERROR only.
Runtime.install({ logger: new DefaultLogger('ERROR') });

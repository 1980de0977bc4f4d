import { DefaultLogger, Runtime } from '@temporalio/worker';

// Keep test output readable: the SDK's own logs at WARN and above only.
Runtime.install({ logger: new DefaultLogger('WARN') });

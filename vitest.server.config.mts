// `npm run test:server`: the second tier. The end-to-end, crash-safety and multi-process lane tests
// again, on the real Temporal server on Postgres (started once by test/support/global-setup.ts), with
// worker processes instead of in-process workers where the tests start them; and the mTLS tier, on a
// server of its own with client-certificate authentication.
import { configDefaults, defineConfig } from 'vitest/config';
import base from './vitest.config.mts';

process.env.ORDER_SAGA_TEMPORAL = 'server';

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: [
      'test/e2e-orders.devserver.test.ts',
      'test/e2e-commands.devserver.test.ts',
      'test/e2e-web-ui.devserver.test.ts',
      'test/crash-safety.devserver.test.ts',
      'test/lanes-processes.devserver.test.ts',
      'test/mtls.server.test.ts',
    ],
    exclude: configDefaults.exclude,
  },
});

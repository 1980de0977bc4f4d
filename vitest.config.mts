import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The Temporal native bridge is unsafe in worker threads: one forked process per test file.
    pool: 'forks',
    // Files run one after another: time-skipping tests run serially, and the machine has 2 cores.
    fileParallelism: false,
    include: ['test/**/*.test.ts'],
    // `.server.test.ts`: only in the second tier (vitest.server.config.mts), on the real Temporal server.
    exclude: [...configDefaults.exclude, 'test/**/*.server.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/setup-runtime.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});

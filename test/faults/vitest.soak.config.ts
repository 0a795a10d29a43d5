// `npm run soak` (scripts/soak.mjs): only the soak, which `npm test` does not include.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/faults/soak.run.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: false,
    // One line per run as it finishes, not all of them at the end.
    disableConsoleIntercept: true,
  },
});

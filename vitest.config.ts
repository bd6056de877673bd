import { availableParallelism } from "node:os";

import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Compiles src/ into a fresh dist/ first: bin/hsm.js and the package's exports run from there.
    globalSetup: ["test/global-setup.ts"],
    // Native addons and worker threads are happiest in child processes.
    pool: "forks",
    // One fork per core. Vitest's default leaves a core free, and on two cores that runs the files one at a time,
    // the second core idle while a test waits on the CLI child it spawned.
    poolOptions: { forks: { maxForks: Math.max(availableParallelism(), 1) } },
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});

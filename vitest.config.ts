import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Compiles src/ into a fresh dist/ first: bin/hsm.js and the package's exports run from there.
    globalSetup: ["test/global-setup.ts"],
    // Native addons and worker threads are happiest in child processes.
    pool: "forks",
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});

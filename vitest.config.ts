import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Native addons and worker threads are happiest in child processes.
    pool: "forks",
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});

import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["{agent,coordinator,shared,test}/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    // Integration tests start brokers and child processes; a loaded CI machine needs room.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    reporters: process.env.AX_TEST_JSON
      ? ["default", ["json", { outputFile: process.env.AX_TEST_JSON }]]
      : ["default"],
  },
});

// The suite's own tests run one after another against one server; reporters are parsed by pytest.
import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["conformance.test.mjs"],
    fileParallelism: false,
    // vitest's default of 5 s per test: the suite's chunk-size pagination test checks 102,400 bytes
    // one by one in Node and took 2.8 s on two loaded cores; a timeout is a machine's pace, not ours.
    testTimeout: 30_000,
  },
})

// The suite's own tests run one after another against one server; reporters are parsed by pytest.
import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["conformance.test.mjs"],
    fileParallelism: false,
  },
})

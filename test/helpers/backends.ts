import { nativeKernels } from "../../src/native/index.js";

/** The metrics backends this machine has: native only where the core is built and enabled. */
export const BACKENDS = ["typescript", "wasm", ...(nativeKernels && process.env.HSM_NATIVE !== "0" ? (["native"] as const) : [])] as const;

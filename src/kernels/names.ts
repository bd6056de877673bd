/** The metrics backends `--backend` accepts; `auto` takes the first one available (see registry.ts). */
export const BACKENDS = ["auto", "native", "tfjs-node", "tfjs-node-gpu", "webgpu", "wasm", "typescript"] as const;
export type BackendName = (typeof BACKENDS)[number];

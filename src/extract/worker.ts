// Worker-thread entry: one session of the rewritten model, running the prompt batches the main thread sends (see states.ts).
import { batchStates, type StatesSetup } from "./states.js";
import type { BatchFeeds } from "../model/batching.js";
import { serveSession } from "../model/workers.js";

await serveSession<StatesSetup, BatchFeeds, Uint16Array>(async (session, setup, f) => {
  // The states are copied out of the binding's buffer into one of their own, which is moved to the main thread.
  const states = (await batchStates(session, setup, f)).slice();
  return { result: states, transfer: [states.buffer] };
});

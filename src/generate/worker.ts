// Worker-thread entry: one session of the rewritten model, decoding the batches the main thread sends (see workers.ts).
import { parentPort, workerData } from "node:worker_threads";

import { decodeBatch } from "./decode-batch.js";
import type { WorkerInit, WorkerReply, WorkerRequest } from "./workers.js";
import { loadSession } from "../model/session.js";
import { collectGarbage } from "../util/memory.js";
import { nativeHeap } from "../kernels/native.js";

/**
 * After each batch, what it left is freed and handed back: the binding's output buffers are memory V8 does not
 * count, so its collector would reach them late, and malloc would keep their pages.
 */
function handBack(): void {
  collectGarbage();
  nativeHeap?.trim();
}

const { model, options, setup } = workerData as WorkerInit;
const port = parentPort!;
const reply = (r: WorkerReply) => port.postMessage(r);
try {
  const session = await loadSession(model, options);
  port.on("message", (r: WorkerRequest | { close: true }) => {
    // Asked to stop (never while a batch runs): the session is released and the thread ends by itself.
    if ("close" in r) {
      void session.release().finally(() => port.close());
      return;
    }
    decodeBatch(session, setup, r.prompts, r.cached, r.newTokens)
      .then(
        (ids) => reply({ id: r.id, ids }),
        (err: unknown) => reply({ id: r.id, error: err instanceof Error ? err.message : String(err) }),
      )
      .finally(handBack);
  });
  reply({ ready: true });
} catch (err) {
  reply({ loadError: (err as Error).message });
  port.close();
}

// Worker-thread entry: one session of the rewritten model, decoding the batches the main thread sends (see workers.ts).
import { decodeBatch, type DecodeSetup } from "./decode-batch.js";
import type { DecodeRequest } from "./workers.js";
import { serveSession } from "../model/workers.js";
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

await serveSession<DecodeSetup, DecodeRequest, number[][]>(
  async (session, setup, r) => ({ result: await decodeBatch(session, setup, r.prompts, r.cached, r.newTokens) }),
  handBack,
);

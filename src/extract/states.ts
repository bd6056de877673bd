/**
 * Where extraction runs its prompt batches: on the main thread's session, or
 * on worker threads, each with a session of its own (worker.ts, through
 * ../model/workers.ts) running one batch at a time. A batch's states do not
 * depend on which session ran it: every session runs the same graph on the
 * same batch.
 */
import type * as ort from "onnxruntime-node";

import { InternalError } from "../errors.js";
import { fillBatch, type BatchFeeds } from "../model/batching.js";
import { promptFeeds } from "../model/feeds.js";
import { hiddenBits } from "../model/hidden-output.js";
import type { InputPlan } from "../model/styles/style.js";
import { startSessionWorkers, workerScript, type SessionRunner, type SessionWorkerInit } from "../model/workers.js";
import { num } from "../onnx/graph.js";
import { HIDDEN_OUTPUT } from "../onnx/rewrite.js";

/** What running a batch needs besides the session: the inputs to feed and the output's shape. */
export interface StatesSetup {
  inputFeeds: InputPlan["feeds"];
  /** Stored layers. */
  layers: number;
  d: number;
  /** The batch the graph's inputs fix (see declaredBatch): a smaller batch runs filled out to it. */
  fixedBatch?: number;
}

/** Where extraction's batches run: each batch's states as float16 bits, [batch, layers, d]. */
export type StateRunner = SessionRunner<BatchFeeds, Uint16Array>;

/** Runs one padded batch through the rewritten graph on `session`; its states as float16 bits, [batch, layers, d]. */
export async function batchStates(
  session: ort.InferenceSession,
  setup: StatesSetup,
  f: BatchFeeds,
): Promise<Uint16Array> {
  const run = setup.fixedBatch === undefined ? f : fillBatch(f, setup.fixedBatch);
  const out = (await session.run(promptFeeds(setup.inputFeeds, run), [HIDDEN_OUTPUT]))[HIDDEN_OUTPUT]!;
  if (
    out.dims.length !== 3 ||
    num(out.dims[0]) !== run.batch ||
    num(out.dims[1]) !== setup.layers ||
    num(out.dims[2]) !== setup.d
  ) {
    throw new InternalError(
      `the rewritten model returned shape [${out.dims.join(", ")}], expected [${run.batch}, ${setup.layers}, ${setup.d}]`,
    );
  }
  const bits = hiddenBits(out);
  // The rows filling out a fixed batch are dropped.
  return run === f ? bits : bits.subarray(0, f.batch * setup.layers * setup.d);
}

/** Batches run on the main thread's session, one at a time. */
export function sessionStates(session: ort.InferenceSession, setup: StatesSetup): StateRunner {
  return {
    parallel: 1,
    run: (f) => batchStates(session, setup, f),
    close: () => session.release(),
  };
}

/** The compiled extraction worker; undefined when running from TypeScript sources, where there is none. */
export const extractionWorkerScript = (): string | undefined => workerScript(import.meta.url, "worker.js");

/**
 * `count` worker threads, each loading the model file at `init.model` into a session of its own (see
 * {@link startSessionWorkers}). The largest batch waiting runs first.
 */
export const workerStates = (
  script: string,
  count: number,
  init: SessionWorkerInit<StatesSetup>,
): Promise<StateRunner> =>
  startSessionWorkers(script, count, init, (f: BatchFeeds) => f.batch * f.length, "extraction");

/**
 * Where generation's batches are decoded: on the main thread's session, or
 * on several worker threads, each with a session of its own (worker.ts,
 * through ../model/workers.ts) decoding one batch at a time.
 */
import type * as ort from "onnxruntime-node";

import { decodeBatch, type DecodeSetup } from "./decode-batch.js";
import { startSessionWorkers, workerScript, type SessionWorkerInit } from "../model/workers.js";

export interface Decoders {
  /** Batches decoded at once. */
  readonly parallel: number;
  /** The generated ids of each prompt (see {@link decodeBatch}); `newTokens` overrides the setup's maximum. */
  decode(prompts: number[][], cached: boolean, newTokens?: number): Promise<number[][]>;
  close(): Promise<void>;
}

/** A batch to decode, as a worker receives it. */
export interface DecodeRequest {
  prompts: number[][];
  cached: boolean;
  newTokens?: number;
}

/** Decoding on the main thread, one batch at a time. */
export function sessionDecoders(session: ort.InferenceSession, setup: DecodeSetup): Decoders {
  return {
    parallel: 1,
    decode: (prompts, cached, newTokens) => decodeBatch(session, setup, prompts, cached, newTokens),
    close: () => session.release(),
  };
}

/** The compiled decoding worker; undefined when running from TypeScript sources, where there is none. */
export const decodingWorkerScript = (): string | undefined => workerScript(import.meta.url, "worker.js");

/**
 * `count` worker threads, each loading the model file at `init.model` into a session of its own (see
 * {@link startSessionWorkers}). The longest batch waiting is decoded first.
 */
export async function workerDecoders(
  script: string,
  count: number,
  init: SessionWorkerInit<DecodeSetup>,
): Promise<Decoders> {
  const work = (r: DecodeRequest) => r.prompts.reduce((n, p) => n + p.length, 0);
  const pool = await startSessionWorkers<DecodeSetup, DecodeRequest, number[][]>(
    script,
    count,
    init,
    work,
    "generation",
  );
  return {
    parallel: count,
    decode: (prompts, cached, newTokens) => pool.run({ prompts, cached, newTokens }),
    close: () => pool.close(),
  };
}

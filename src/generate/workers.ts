/**
 * Where generation's batches are decoded: on the main thread's session, or
 * on several worker threads, each with a session of its own
 * (worker.ts) running one batch at a time.
 *
 * A decoding step of a small batch is a chain of small matrix products that
 * onnxruntime splits poorly across cores; two batches decoded side by side,
 * one core each, finish sooner than the same two one after the other on both
 * cores. Each worker's session holds its own copy of the weights.
 */
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";

import type * as ort from "onnxruntime-node";

import { decodeBatch, type DecodeSetup } from "./decode-batch.js";
import { externalDataEntry, type GraphProto } from "../onnx/graph.js";
import { ModelLoadError, type SessionOptions } from "../model/session.js";

/**
 * The bytes of weights one session holds: the graph file and every external-data
 * file its initializers name (each counted once; one that cannot be found, as
 * onnxruntime would then refuse the model anyway, counts nothing).
 */
export function weightBytes(onnxPath: string, graph: GraphProto): number {
  let bytes = statSync(onnxPath).size;
  const files = new Set<string>();
  for (const t of graph.initializer ?? []) {
    const location = externalDataEntry(t, "location");
    if (location) files.add(location);
  }
  for (const f of files) {
    try {
      bytes += statSync(join(dirname(onnxPath), f)).size;
    } catch {
      /* counted as nothing */
    }
  }
  return bytes;
}

/**
 * How many of `wanted` workers fit: each holds a copy of the weights, and
 * together they may take at most half the memory now available. At least one.
 * `reason` says why there are fewer, for the user.
 */
export function affordableWorkers(
  wanted: number,
  weights: number,
  available: number,
): { workers: number; reason?: string } {
  const fit = Math.max(1, Math.floor(available / 2 / Math.max(1, weights)));
  if (fit >= wanted) return { workers: wanted };
  const gb = (b: number) => `${(b / 1e9).toFixed(1)} GB`;
  return {
    workers: fit,
    reason: `decoding with ${fit} session${fit === 1 ? "" : "s"} instead of ${wanted}: each holds its own copy of the model's ${gb(weights)} of weights and ${gb(available)} of memory is available (--workers overrides)`,
  };
}

export interface Decoders {
  /** Batches decoded at once. */
  readonly parallel: number;
  /** The generated ids of each prompt (see {@link decodeBatch}); `newTokens` overrides the setup's maximum. */
  decode(prompts: number[][], cached: boolean, newTokens?: number): Promise<number[][]>;
  close(): Promise<void>;
}

/** Messages between the main thread and a worker. */
export type WorkerRequest = { id: number; prompts: number[][]; cached: boolean; newTokens?: number };
export type WorkerReply =
  { ready: true } | { loadError: string } | { id: number; ids: number[][] } | { id: number; error: string };
export interface WorkerInit {
  model: string;
  options: SessionOptions;
  setup: DecodeSetup;
}

/** Decoding on the main thread, one batch at a time. */
export function sessionDecoders(session: ort.InferenceSession, setup: DecodeSetup): Decoders {
  return {
    parallel: 1,
    decode: (prompts, cached, newTokens) => decodeBatch(session, setup, prompts, cached, newTokens),
    close: () => session.release(),
  };
}

/** The compiled worker script; undefined when running from TypeScript sources, where there is none. */
export function workerScript(): string | undefined {
  const p = join(dirname(fileURLToPath(import.meta.url)), "worker.js");
  return existsSync(p) ? p : undefined;
}

/**
 * `count` workers, each loading the model file at `model` into a session of
 * its own. Resolves once every session is loaded; a model onnxruntime
 * refuses fails with the {@link ModelLoadError} of the first worker that
 * refused it, and no worker is left running.
 */
export async function workerDecoders(script: string, count: number, init: WorkerInit): Promise<Decoders> {
  const workers = Array.from({ length: count }, () => new Worker(script, { workerData: init }));
  const idle: Worker[] = [];
  const queue: { request: WorkerRequest; settle: Settle }[] = [];
  const waiting = new Map<number, Settle>();
  let nextId = 0;
  let closed = false;
  const stopped = (why: string) => {
    closed = true;
    const err = new Error(why);
    for (const s of waiting.values()) s.reject(err);
    for (const q of queue) q.settle.reject(err);
    waiting.clear();
    queue.length = 0;
  };
  // The longest batch waiting goes first, so the run does not end on one worker decoding a long batch alone
  // (callers write results in their own order).
  const work = (r: WorkerRequest) => r.prompts.reduce((n, p) => n + p.length, 0);
  const dispatch = () => {
    while (!closed && idle.length > 0 && queue.length > 0) {
      const worker = idle.pop()!;
      let k = 0;
      for (let j = 1; j < queue.length; j++) if (work(queue[j]!.request) > work(queue[k]!.request)) k = j;
      const { request, settle } = queue.splice(k, 1)[0]!;
      waiting.set(request.id, settle);
      running.add(request.id);
      worker.postMessage(request);
    }
  };
  const exited = workers.map((worker) => new Promise<void>((resolve) => worker.once("exit", () => resolve())));
  // Batches sent and not answered yet. A thread is never stopped inside onnxruntime's work: its completion would
  // call into a thread that is gone and abort the process.
  const running = new Set<number>();
  let drained: (() => void) | undefined;
  const idleAll = () => new Promise<void>((resolve) => (running.size === 0 ? resolve() : (drained = resolve)));
  const ready = workers.map(
    (worker) =>
      new Promise<void>((resolve, reject) => {
        worker.on("message", (reply: WorkerReply) => {
          if ("ready" in reply) {
            resolve();
            return;
          }
          if ("loadError" in reply) {
            reject(new ModelLoadError(reply.loadError));
            return;
          }
          const settle = waiting.get(reply.id);
          waiting.delete(reply.id);
          idle.push(worker);
          if ("error" in reply) settle?.reject(new Error(reply.error));
          else settle?.resolve(reply.ids);
          running.delete(reply.id);
          if (running.size === 0) drained?.();
          dispatch();
        });
        worker.on("error", (err) => {
          reject(err);
          stopped(`a decoding thread failed: ${err.message}`);
        });
        worker.on("exit", (code) => {
          reject(new Error(`a decoding thread stopped with exit code ${code} while loading the model`));
          if (!closed) stopped(`a decoding thread stopped with exit code ${code}`);
        });
      }),
  );
  /**
   * Stops every thread once its work is done: batches running finish first (their callers were already told
   * generation stopped), then each thread releases its session and ends. A thread still loading its session
   * ends when the load settles (see the callers of close).
   */
  const close = async () => {
    if (!closed) stopped("generation was stopped");
    await idleAll();
    for (const w of workers) w.postMessage({ close: true });
    // A thread that does not end by itself once its session is released holds nothing onnxruntime works on.
    const late = setTimeout(() => workers.forEach((w) => void w.terminate()), CLOSE_GRACE_MS);
    await Promise.all(exited);
    clearTimeout(late);
  };
  // Every thread's load settles before any is stopped: one refused model must not stop another mid-load.
  const loads = await Promise.allSettled(ready);
  const refused = loads.find((l): l is PromiseRejectedResult => l.status === "rejected");
  if (refused) {
    await close();
    throw refused.reason;
  }
  idle.push(...workers);
  return {
    parallel: count,
    decode: (prompts, cached, newTokens) =>
      new Promise<number[][]>((resolve, reject) => {
        if (closed) {
          reject(new Error("generation was stopped"));
          return;
        }
        queue.push({ request: { id: nextId++, prompts, cached, newTokens }, settle: { resolve, reject } });
        dispatch();
      }),
    close,
  };
}

/** How long a thread asked to stop may take to release its session and end before it is stopped. */
const CLOSE_GRACE_MS = 10_000;

interface Settle {
  resolve(ids: number[][]): void;
  reject(err: Error): void;
}

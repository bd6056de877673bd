/**
 * Sessions in worker threads: each thread loads the model file into an
 * onnxruntime session of its own and runs the requests the main thread
 * sends it, one at a time. Generation decodes batches on them and extraction
 * runs prompt batches on them.
 *
 * A small batch is a chain of small matrix products that onnxruntime splits
 * poorly across cores; two batches run side by side, one core each, finish
 * sooner than the same two one after the other on both cores. Each thread's
 * session holds its own copy of the weights.
 */
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parentPort, Worker, workerData } from "node:worker_threads";

import type * as ort from "onnxruntime-node";

import { DEFAULT_CPU_WORKERS } from "../defaults.js";
import { externalDataEntry, type GraphProto } from "../onnx/graph.js";
import { computeCores } from "../util/cores.js";
import { availableMemory } from "../util/memory.js";
import { ModelLoadError, loadSession, type Device, type SessionOptions } from "./session.js";

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
 * How many of `wanted` sessions fit: each holds a copy of the weights, and
 * together they may take at most half the memory now available. At least one.
 * `reason` says why there are fewer, for the user; `what` names the work
 * ("decoding", "extracting").
 */
export function affordableWorkers(
  wanted: number,
  weights: number,
  available: number,
  what = "decoding",
): { workers: number; reason?: string } {
  const fit = Math.max(1, Math.floor(available / 2 / Math.max(1, weights)));
  if (fit >= wanted) return { workers: wanted };
  const gb = (b: number) => `${(b / 1e9).toFixed(1)} GB`;
  return {
    workers: fit,
    reason: `${what} with ${fit} session${fit === 1 ? "" : "s"} instead of ${wanted}: each holds its own copy of the model's ${gb(weights)} of weights and ${gb(available)} of memory is available (--workers overrides)`,
  };
}

/**
 * The compiled worker script `name` beside the module at `moduleUrl`; undefined when running from TypeScript
 * sources, where there is none.
 */
export function workerScript(moduleUrl: string, name: string): string | undefined {
  const p = join(dirname(fileURLToPath(moduleUrl)), name);
  return existsSync(p) ? p : undefined;
}

/** What every worker thread is started with: the model file, its session's options, and the work's own setup. */
export interface SessionWorkerInit<Setup> {
  model: string;
  options: SessionOptions;
  setup: Setup;
}

/** Messages between the main thread and a worker. */
type Request<Req> = { id: number; request: Req };
type Reply<Res> = { ready: true } | { loadError: string } | { id: number; result: Res } | { id: number; error: string };

/** Where requests run: one session on the main thread, or threads with a session each taking them as they fall idle. */
export interface SessionRunner<Req, Res> {
  /** Requests run at once. */
  readonly parallel: number;
  run(request: Req): Promise<Res>;
  /** Releases the sessions once the requests running are done. */
  close(): Promise<void>;
}

/**
 * `count` threads running `script` (which calls {@link serveSession}), each loading `init.model` into a session of
 * its own. Resolves once every session is loaded; a model onnxruntime refuses fails with the
 * {@link ModelLoadError} of the first thread that refused it, and no thread is left running. Of the requests
 * waiting, the one of most `work` goes first, so that a run does not end on one thread working through a long
 * request alone (callers put results in their own order). `what` names the work in errors ("generation").
 */
export async function startSessionWorkers<Setup, Req, Res>(
  script: string,
  count: number,
  init: SessionWorkerInit<Setup>,
  work: (request: Req) => number,
  what: string,
): Promise<SessionRunner<Req, Res>> {
  const workers = Array.from({ length: count }, () => new Worker(script, { workerData: init }));
  const idle: Worker[] = [];
  const queue: { message: Request<Req>; settle: Settle<Res> }[] = [];
  const waiting = new Map<number, Settle<Res>>();
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
  const dispatch = () => {
    while (!closed && idle.length > 0 && queue.length > 0) {
      const worker = idle.pop()!;
      let k = 0;
      for (let j = 1; j < queue.length; j++)
        if (work(queue[j]!.message.request) > work(queue[k]!.message.request)) k = j;
      const { message, settle } = queue.splice(k, 1)[0]!;
      waiting.set(message.id, settle);
      running.add(message.id);
      worker.postMessage(message);
    }
  };
  const exited = workers.map((worker) => new Promise<void>((resolve) => worker.once("exit", () => resolve())));
  // Requests sent and not answered yet. A thread is never stopped inside onnxruntime's work: its completion would
  // call into a thread that is gone and abort the process.
  const running = new Set<number>();
  let drained: (() => void) | undefined;
  const idleAll = () => new Promise<void>((resolve) => (running.size === 0 ? resolve() : (drained = resolve)));
  const ready = workers.map(
    (worker) =>
      new Promise<void>((resolve, reject) => {
        worker.on("message", (reply: Reply<Res>) => {
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
          else settle?.resolve(reply.result);
          running.delete(reply.id);
          if (running.size === 0) drained?.();
          dispatch();
        });
        worker.on("error", (err) => {
          reject(err);
          stopped(`a worker thread failed: ${err.message}`);
        });
        worker.on("exit", (code) => {
          reject(new Error(`a worker thread stopped with exit code ${code} while loading the model`));
          if (!closed) stopped(`a worker thread stopped with exit code ${code}`);
        });
      }),
  );
  /**
   * Stops every thread once its work is done: requests running finish first (their callers were already told
   * the work stopped), then each thread releases its session and ends. A thread still loading its session
   * ends when the load settles (see the callers of close).
   */
  const close = async () => {
    if (!closed) stopped(`${what} was stopped`);
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
    run: (request) =>
      new Promise<Res>((resolve, reject) => {
        if (closed) {
          reject(new Error(`${what} was stopped`));
          return;
        }
        queue.push({ message: { id: nextId++, request }, settle: { resolve, reject } });
        dispatch();
      }),
    close,
  };
}

/**
 * The body of a worker thread started by {@link startSessionWorkers}: loads the session, then answers each
 * request with `handle`'s result (its `transfer` list moved, not copied) and calls `after` once the answer is
 * sent. Asked to stop (never while a request runs), it releases the session and the thread ends by itself.
 */
export async function serveSession<Setup, Req, Res>(
  handle: (
    session: ort.InferenceSession,
    setup: Setup,
    request: Req,
  ) => Promise<{ result: Res; transfer?: ArrayBuffer[] }>,
  after: () => void = () => {},
): Promise<void> {
  const { model, options, setup } = workerData as SessionWorkerInit<Setup>;
  const port = parentPort!;
  const reply = (r: Reply<Res>, transfer: ArrayBuffer[] = []) => port.postMessage(r, transfer);
  try {
    const session = await loadSession(model, options);
    port.on("message", (m: Request<Req> | { close: true }) => {
      if ("close" in m) {
        void session.release().finally(() => port.close());
        return;
      }
      handle(session, setup, m.request)
        .then(
          ({ result, transfer }) => reply({ id: m.id, result }, transfer),
          (err: unknown) => reply({ id: m.id, error: err instanceof Error ? err.message : String(err) }),
        )
        .finally(after);
    });
    reply({ ready: true });
  } catch (err) {
    reply({ loadError: err instanceof ModelLoadError ? err.reason : (err as Error).message });
    port.close();
  }
}

/** How long a thread asked to stop may take to release its session and end before it is stopped. */
const CLOSE_GRACE_MS = 10_000;

interface Settle<Res> {
  resolve(result: Res): void;
  reject(err: Error): void;
}

/** Where a run's sessions go: the device, how many threads hold one, and the options each is opened with. */
export interface SessionPlace {
  device: Device;
  workers: number;
  sessionOptions: SessionOptions & { device: Device; spin: false };
  /** The options of one session on the main thread, where the workers cannot start: the threads asked for, or every core. */
  aloneOptions: SessionOptions & { device: Device; spin: false };
}

/**
 * How many sessions in worker threads a run starts (never more than it has `requests`; by default
 * {@link DEFAULT_CPU_WORKERS} on the CPU but no more than the cores this process may compute on, fewer where their
 * copies of the model's `weights` bytes would not fit in memory, one on a GPU) and the options each gets: the
 * cores shared out. `what` names the work for the user ("decoding", "extracting").
 */
export function placeSessions(
  o: { device?: Device; threads?: number; workers?: number },
  weights: number,
  requests: number,
  what: string,
  log: (message: string, level: "info" | "warn") => void,
): SessionPlace {
  const device = o.device ?? "cpu";
  let wanted = o.workers ?? (device === "cpu" ? Math.min(DEFAULT_CPU_WORKERS, computeCores()) : 1);
  if (device === "webgpu" && wanted > 1) {
    // onnxruntime's WebGPU provider serves one thread of a process: sessions in worker threads crash it.
    log(`${what} with one session instead of ${wanted}: on WebGPU batches run one at a time`, "info");
    wanted = 1;
  }
  if (o.workers === undefined && wanted > 1) {
    const fit = affordableWorkers(wanted, weights, availableMemory(), what);
    if (fit.reason) log(fit.reason, "info");
    wanted = fit.workers;
  }
  const workers = Math.max(1, Math.min(wanted, requests));
  const threads = o.threads ?? (workers > 1 ? Math.max(1, Math.floor(computeCores() / workers)) : undefined);
  return {
    device,
    workers,
    sessionOptions: { device, threads, spin: false },
    aloneOptions: { device, threads: o.threads, spin: false },
  };
}

/** The line telling the user that `parallel` batches run at once (`what`: "decoding", "extracting"); undefined for one. */
export function parallelLine(what: string, parallel: number, threads: number | undefined): string | undefined {
  if (parallel <= 1) return undefined;
  const each = `${threads} thread${threads === 1 ? "" : "s"} each`;
  return `${what} ${parallel} batches at once, each by an onnxruntime session of its own (${each})`;
}

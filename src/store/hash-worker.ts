// Worker-thread entry: takes files from the shared counter until none is left (see hash.ts).
import { parentPort, workerData } from "node:worker_threads";

import type { HashJob } from "./hash-file.js";
import { hashTaken, type HashMessage } from "./hash.js";

const { jobs, next } = workerData as { jobs: HashJob[]; next: Int32Array };
hashTaken(jobs, next, (ids, outcomes) => parentPort!.postMessage({ ids, outcomes } satisfies HashMessage));
parentPort!.postMessage({ done: true } satisfies HashMessage);

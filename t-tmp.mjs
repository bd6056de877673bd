import { computeMetrics } from "./dist/metrics/compute.js";
import * as P from "./dist/metrics/probe.js";
const t = performance.now();
const r = await computeMetrics("/tmp/bench-fx/store", { scored: "/tmp/bench-fx/scored.jsonl", backend: "native", metrics: ["kts"], layers: [13], bootstrap: 1000,
  onProgress: (l, p) => console.log(l, p, ((performance.now()-t)/1000).toFixed(2)) });
console.log("total B=1", ((performance.now()-t)/1000).toFixed(2));

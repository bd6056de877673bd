import { generate } from "./dist/runner/generate.js";
import { rmSync, readFileSync } from "node:fs";
rmSync("/tmp/gen1.jsonl", { force: true });
const r = await generate({ modelDir: "/tmp/tiny", bank: "/tmp/fx/bank.jsonl", out: "/tmp/gen1.jsonl", batchSize: 8 });
console.log(r);
console.log(readFileSync("/tmp/gen1.jsonl", "utf8").split("\n").slice(0, 2).join("\n"));

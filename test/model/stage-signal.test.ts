/**
 * A model staged for onnxruntime (src/model/session.ts, stageModel) lives in a private folder of the temporary
 * directory, with hard links to its weights, while its sessions load: minutes for a large model. A job stopped in
 * that time (Ctrl-C, a scheduler's SIGTERM) must not leave the folder, and the links that keep the weights on disk,
 * behind. The staging runs in a child process of the compiled CLI's modules, with the CLI's signal handling.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { beforeAll, describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/synthetic/llama.js";
import { tempDir } from "../helpers/tmp.js";

const DIST = join(import.meta.dirname, "..", "..", "dist");
const dir = tempDir("hsm-stage-signal-");
const model = join(dir, "model");
const child = join(dir, "stage.mjs");
const dist = (path: string) => JSON.stringify(pathToFileURL(join(DIST, path)).href);

beforeAll(async () => {
  await writeTinyModel(model, { layers: 1, hidden: 16, heads: 2, kvHeads: 1, seed: 1, externalData: true });
  writeFileSync(
    child,
    `import { readFileSync } from "node:fs";
import { stageModel } from ${dist("model/session.js")};
import { decodeModel } from ${dist("onnx/graph.js")};
import { cleanUpOnStopSignals } from ${dist("util/stop.js")};
cleanUpOnStopSignals();
const onnx = process.argv[2];
const stage = await stageModel(onnx, decodeModel(readFileSync(onnx)).graph);
process.stdout.write(stage.dir + "\\n");
setInterval(() => {}, 1000);
`,
  );
});

describe("a staged model", () => {
  it.each(["SIGTERM", "SIGINT"] as const)("is removed when %s stops the process", async (signal) => {
    const tmp = join(dir, `tmp-${signal}`);
    mkdirSync(tmp);
    const proc = spawn(process.execPath, [child, join(model, "model.onnx")], {
      env: { ...process.env, TMPDIR: tmp },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    proc.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    const staged = await new Promise<string>((resolve, reject) => {
      proc.stdout.once("data", (b: Buffer) => resolve(b.toString().trim()));
      proc.once("close", () => reject(new Error(`the child ended before staging: ${stderr}`)));
    });
    expect(staged.startsWith(join(tmp, ".hsm-model-"))).toBe(true);
    expect(readdirSync(staged)).toContain("model.onnx_data");
    const ended = new Promise<NodeJS.Signals | null>((resolve) => proc.once("close", (_code, s) => resolve(s)));
    proc.kill(signal);
    expect(await ended).toBe(signal);
    expect(stderr).toBe("");
    expect(existsSync(staged)).toBe(false);
    expect(readdirSync(tmp)).toEqual([]);
  });
});

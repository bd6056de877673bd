/**
 * `hsm study` on three generated models, killed with SIGKILL during the second
 * model's extraction and run again, ends with the stores and answers of an
 * uninterrupted study of the same file, byte for byte.
 *
 * The kill point is made deterministic by a preload in the child: right after
 * the second model's store commits its first block of rows (the bank has more
 * main-forward rows than one commit block holds), the process says so on stderr
 * and stops until the test kills it. So the kill lands while model 1 is
 * finished, model 2's store holds some committed rows but not all, and model 3
 * has not started — and the test checks each of those.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { DEFAULT_COMMIT_ROWS } from "../../src/defaults.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const TINY = { layers: 3, hidden: 32, heads: 2, kvHeads: 1 } as const;
const MODELS = ["tiny-a", "tiny-b", "tiny-c"] as const;
/** 180 facts × 6 main-forward rows: one full commit block of DEFAULT_COMMIT_ROWS rows and a partial one. */
const FACTS = 180;
const MAIN_ROWS = FACTS * 6;
/** Reverse questions: answered, never extracted. */
const EXTRA_ROWS = 12;
const QUERIES = MAIN_ROWS + EXTRA_ROWS;
/** A generous bound for one whole study of three tiny models on a busy machine. */
const STUDY_TIMEOUT_MS = 600_000;

const dir = tempDir("hsm-study-kill-");
const PRELOAD = join(dir, "stop-after-commit.mjs");
const MARK = "stopped after committing rows_done = ";

// Wraps fs/promises.rename (the last step of every atomic manifest write): once the
// manifest named by HSM_TEST_STOP_MANIFEST is committed, incomplete and with rows in
// it, the process reports it and blocks for good, waiting for the test's SIGKILL.
writeFileSync(
  PRELOAD,
  `import { readFileSync, writeSync } from "node:fs";
import { createRequire, syncBuiltinESMExports } from "node:module";
const fsp = createRequire(import.meta.url)("node:fs/promises");
const rename = fsp.rename;
fsp.rename = async (from, to, ...rest) => {
  await rename(from, to, ...rest);
  if (String(to) !== process.env.HSM_TEST_STOP_MANIFEST) return;
  const m = JSON.parse(readFileSync(to, "utf8"));
  if (m.complete || m.rows_done === 0) return;
  writeSync(2, ${JSON.stringify(MARK)} + m.rows_done + "\\n");
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
};
syncBuiltinESMExports();
`,
);

/** A study file of the three models writing into `outputs` (relative to the study file). */
function studyFile(outputs: string, bank: string): string {
  const file = join(dir, `${outputs}.yaml`);
  writeFileSync(
    file,
    `bank: ${bank}
outputs: ${outputs}
generation: { max_new_tokens: 24, max_prompt_len: 192, seed: 20260101, temperature: 0 }
run: { batch_size: 64, threads: 1 }
models:
${MODELS.map((m) => `  - { name: ${m}, model_dir: models/${m} }`).join("\n")}
`,
  );
  return file;
}

function study(file: string) {
  return spawnSync(process.execPath, [BIN, "study", file, "--quiet"], { encoding: "utf8", timeout: STUDY_TIMEOUT_MS });
}

/** Lines of a JSONL file. */
function lines(file: string): string[] {
  return readFileSync(file, "utf8").trim().split("\n");
}

/**
 * A store's manifest without what differs between two runs by design: when it was written, how long the self-check
 * took, and the seal over both.
 */
function manifestSansTimes(store: string): Record<string, unknown> {
  const {
    created_at: _created,
    manifest_sha256: _sealed,
    self_check,
    ...rest
  } = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
  const { seconds: _seconds, ...check } = self_check;
  return { ...rest, self_check: check };
}

describe("hsm study, killed during the second model's extraction and run again", () => {
  const whole = join(dir, "whole");
  const killed = join(dir, "killed");
  let killedFile: string;
  let stopped: number | undefined;
  let killedStdout = "";

  beforeAll(async () => {
    expect(MAIN_ROWS).toBeGreaterThan(DEFAULT_COMMIT_ROWS);
    const fx = await writeFixture(join(dir, "fixture"), { facts: FACTS, extraRows: EXTRA_ROWS, d: 8, layersTotal: 4 });
    expect([fx.rows, fx.mainForwardRows]).toEqual([QUERIES, MAIN_ROWS]);
    for (const [i, m] of MODELS.entries()) await writeTinyModel(join(dir, "models", m), { ...TINY, seed: i + 1 });
    killedFile = studyFile("killed", fx.bank);

    const child = spawn(process.execPath, ["--import", PRELOAD, BIN, "study", killedFile, "--quiet"], {
      env: { ...process.env, HSM_TEST_STOP_MANIFEST: join(killed, "hidden", "tiny-b", "index.json") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (killedStdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => {
      stderr += b.toString();
      const at = new RegExp(`${MARK}(\\d+)\\n`).exec(stderr);
      if (at && stopped === undefined) {
        stopped = Number(at[1]);
        child.kill("SIGKILL");
      }
    });
    const signal = await new Promise<NodeJS.Signals | null>((resolve) =>
      child.on("close", (_code, sig) => resolve(sig)),
    );
    expect(signal, `the study ended by itself instead of stopping in tiny-b's extraction:\n${stderr}`).toBe("SIGKILL");

    const r = study(studyFile("whole", fx.bank));
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
  }, 2 * STUDY_TIMEOUT_MS);

  it("the kill lands in the second model's extraction: model 1 finished, model 2 partly stored, model 3 not started", () => {
    expect(stopped).toBe(DEFAULT_COMMIT_ROWS);
    expect(killedStdout).toMatch(/^tiny-a export: /m);
    expect(killedStdout).toMatch(/^tiny-b score: /m);
    expect(killedStdout).not.toMatch(/^tiny-b extract: /m);
    expect(killedStdout).not.toMatch(/^tiny-c /m);

    const a = JSON.parse(readFileSync(join(killed, "hidden", "tiny-a", "index.json"), "utf8"));
    expect([a.rows_done, a.complete]).toEqual([MAIN_ROWS, true]);
    expect(existsSync(join(killed, "metrics", "tiny-a", "kts.json"))).toBe(true);

    expect(lines(join(killed, "evaluation", "tiny-b.jsonl"))).toHaveLength(QUERIES);
    const b = JSON.parse(readFileSync(join(killed, "hidden", "tiny-b", "index.json"), "utf8"));
    expect([b.rows_done, b.complete]).toEqual([DEFAULT_COMMIT_ROWS, false]);
    expect(existsSync(join(killed, "hidden", "tiny-b", ".hsm.lock"))).toBe(true); // left behind by the killed process
    expect(existsSync(join(killed, "metrics", "tiny-b"))).toBe(false);

    expect(existsSync(join(killed, "evaluation", "tiny-c.jsonl"))).toBe(false);
    expect(existsSync(join(killed, "hidden", "tiny-c"))).toBe(false);
    expect(existsSync(join(killed, "study.json"))).toBe(false);
  });

  it("a rerun skips what is finished, resumes model 2 from its committed rows and finishes the study", () => {
    const r = study(killedFile);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^tiny-a extract: store complete, skipped$/m);
    expect(r.stdout).toMatch(new RegExp(`^tiny-b generate: all ${QUERIES} queries already answered, skipped$`, "m"));
    expect(r.stdout).toMatch(new RegExp(`^tiny-b extract: ${MAIN_ROWS - DEFAULT_COMMIT_ROWS} rows \\(`, "m"));
    expect(r.stdout).toMatch(new RegExp(`^tiny-c generate: ${QUERIES} queries answered \\(`, "m"));
    const record = JSON.parse(readFileSync(join(killed, "study.json"), "utf8"));
    expect(record.models.map((m: { name: string; status: string }) => [m.name, m.status])).toEqual(
      MODELS.map((m) => [m, "done"]),
    );
  });

  it("ends with the stores and answers of the uninterrupted study, byte for byte", () => {
    for (const m of MODELS) {
      const [k, w] = [join(killed, "hidden", m), join(whole, "hidden", m)];
      // The same files: no lock, temporary or partial file left behind.
      expect(readdirSync(k).sort(), m).toEqual(readdirSync(w).sort());
      expect(readdirSync(w).sort(), m).toEqual(["L001.npy", "L002.npy", "index.json"]);
      for (const f of ["L001.npy", "L002.npy"])
        expect(readFileSync(join(k, f)).equals(readFileSync(join(w, f))), `${m}/${f}`).toBe(true);
      // index.json records when it was written and the self-check's time; all else, checksums included, is equal.
      expect(manifestSansTimes(k), `${m}/index.json`).toEqual(manifestSansTimes(w));
      for (const f of [`${m}.jsonl`, `${m}.scored.jsonl`]) {
        expect(readFileSync(join(killed, "evaluation", f)).equals(readFileSync(join(whole, "evaluation", f))), f).toBe(
          true,
        );
      }
      // The metrics name their (different) paths; their rows are equal.
      for (const f of ["iss.json", "kts.json"]) {
        const rows = (root: string) => JSON.parse(readFileSync(join(root, "metrics", m, f), "utf8")).rows;
        expect(rows(killed), `${m} ${f}`).toEqual(rows(whole));
      }
    }
  });
});

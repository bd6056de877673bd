/**
 * The `hsm` command as a user runs it: the compiled CLI in a child process,
 * checked for exit status, stdout and stderr.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  openSync,
  writeSync,
  closeSync,
  writeFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";

import { exitStatusFor } from "../../src/cli/main.js";
import { DEFAULT_BATCH_SIZE, DEFAULT_LAYER_RULE, DEFAULT_TINY_MODEL, MAX_NEW_TOKENS } from "../../src/defaults.js";
import { EXIT, HsmError, UsageError } from "../../src/errors.js";
import { runChild } from "../helpers/child.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir();
// Permission bits do not stop root, so the permission cases run only for other users.
const root = process.getuid?.() === 0;

function hsm(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    encoding: "utf8",
    env: { ...process.env, ...env },
    cwd: dir,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** {@link hsm} for a long command, without blocking the test worker. */
function hsmAsync(args: string[]) {
  return runChild(process.execPath, [BIN, ...args], { env: process.env, cwd: dir });
}

beforeAll(() => {
  const r = hsm(["fixture", join(dir, "fx"), "--facts", "10", "--d", "8", "--quiet"]);
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
});

describe("hsm", () => {
  it("explains itself", () => {
    const r = hsm(["--help"]);
    expect(r.status).toBe(0);
    for (const cmd of ["verify", "fixture", "check-bank", "layers", "demo"]) expect(r.stdout).toContain(cmd);
    expect(r.stdout).toContain("compute ISS and KTS over a hidden-state store");
    // A word that is no command gets the same help, registries and all.
    expect(hsm(["no-such-command", "--help"]).stdout).toBe(r.stdout);
    // Help for a command that does not exist is a usage error, as running it is.
    for (const args of [["help", "verfy"], ["help", "help", "verfy"], ["verfy"]]) {
      expect(hsm(args)).toEqual({
        status: 2,
        stdout: "",
        stderr: "error: unknown command 'verfy'\n(Did you mean verify?)\n(run with --help for usage)\n",
      });
    }
    expect(hsm(["help", "verify"])).toMatchObject({ status: 0, stdout: hsm(["verify", "--help"]).stdout });
    expect(hsm(["verify", "--help"]).stdout).toMatch(
      /Exit status: 0 when everything holds, 1 with one line per problem, 2 on a usage error/,
    );
  });

  it("verify: exit 0 on a good store", () => {
    const r = hsm(["verify", join(dir, "fx", "store")]);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/store: OK — 4 files, 60 rows, complete; 0\.\d MB hashed in \d+\.\d\d s\n$/);
    const json = JSON.parse(hsm(["verify", "--json", join(dir, "fx", "store")]).stdout);
    expect(json).toMatchObject({ ok: true, complete: true, rows: 60, problems: [] });
    expect(json.files).toHaveLength(4);
  });

  it("verify: exit 1 with one line per problem naming the file", () => {
    const store = join(dir, "bad");
    cpSync(join(dir, "fx", "store"), store, { recursive: true });
    const fd = openSync(join(store, "L003.npy"), "r+");
    writeSync(fd, Buffer.from([1, 2, 3]), 0, 3, 200);
    closeSync(fd);
    writeFileSync(join(store, "L004.npy"), "this is not a numpy file at all");
    const r = hsm(["verify", store]);
    expect(r.status).toBe(1);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toBe(`${store}/L004.npy: is 31 bytes but the manifest says 1088 (truncated)`);
    expect(lines[1]).toMatch(new RegExp(`^${store}/L004\\.npy: npy header magic: is not \\\\x93NUMPY`));
    expect(lines[2]).toMatch(new RegExp(`^${store}/L003\\.npy: sha256 is [0-9a-f]{64}, the manifest says`));
    expect(lines[3]).toBe(`${store}: 3 problems; do not trust this store`);
    expect(r.stderr).toBe("");
    const json = JSON.parse(hsm(["verify", "--json", store]).stdout);
    expect(json.problems.map((p: { file: string; problem: string }) => `${p.file}:${p.problem}`)).toEqual([
      "L004.npy:size",
      "L004.npy:npy-header",
      "L003.npy:sha256",
    ]);
  });

  it("verify: exit 2 on usage errors, without a stack trace", () => {
    const missing = hsm(["verify", join(dir, "nowhere")]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe(`hsm: ${join(dir, "nowhere")}: no such store folder\n`);
    const jobs = hsm(["verify", "--jobs", "0", join(dir, "fx", "store")]);
    expect(jobs.status).toBe(2);
    expect(jobs.stderr).toContain('Expected an integer of at least 1 for --jobs but received "0"');
    expect(hsm(["verify"]).status).toBe(2);
    expect(hsm(["frobnicate"]).status).toBe(2);
  });

  it("verify: a file is not a store folder, and an unreadable path says why rather than 'no such'", () => {
    const file = join(dir, "fx", "bank.jsonl");
    const r = hsm(["verify", file]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(`hsm: ${file}: is a file, not a store folder\n`);
    const loop = join(dir, "loop");
    symlinkSync(loop, loop);
    for (const cmd of ["verify", "metrics"]) {
      const u = hsm([cmd, loop]);
      expect(u.status).toBe(1);
      expect(u.stderr).toBe(
        `hsm: ${loop}: the store folder cannot be read (ELOOP: too many symbolic links encountered)\n`,
      );
    }
  });

  it.skipIf(root)(
    "verify: a folder without read permission is unreadable, not missing (skipped as root: permissions do not stop root)",
    () => {
      const locked = join(dir, "locked-store");
      cpSync(join(dir, "fx", "store"), locked, { recursive: true });
      chmodSync(locked, 0o000);
      try {
        const r = hsm(["verify", locked]);
        expect(r.status).toBe(1);
        expect(r.stderr).toBe(`hsm: ${locked}: the store folder cannot be read (EACCES: permission denied)\n`);
      } finally {
        chmodSync(locked, 0o700);
      }
    },
  );

  it.skipIf(root)(
    "check-bank: a file without read permission is unreadable, not missing (skipped as root: permissions do not stop root)",
    () => {
      const locked = join(dir, "locked.jsonl");
      cpSync(join(dir, "fx", "bank.jsonl"), locked);
      chmodSync(locked, 0o000);
      const r = hsm(["check-bank", locked]);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/permission denied/i);
      expect(r.stderr).not.toMatch(/no such|unexpected error/);
    },
  );

  it("check-bank: a folder where the bank should be is named as a folder", () => {
    const folder = join(dir, "bank-folder");
    mkdirSync(folder);
    const r = hsm(["check-bank", folder]);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(`hsm: ${folder}: cannot be read: it is a directory (EISDIR)\n`);
  });

  it("--device is one closed set for extract, generate and run, checked before any work", () => {
    const bank = join(dir, "fx", "bank.jsonl");
    for (const [cmd, out] of [
      ["extract", "--out"],
      ["generate", "--out"],
      ["run", "--outputs"],
    ] as const) {
      const r = hsm([
        cmd,
        "--model-dir",
        join(dir, "no-model"),
        "--bank",
        bank,
        out,
        join(dir, `dev-${cmd}`),
        "--device",
        "tpu",
      ]);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(/^hsm: Expected --device cpu, cuda or webgpu but received "tpu"\n/);
      expect(existsSync(join(dir, `dev-${cmd}`))).toBe(false);
    }
  });

  it("export: --format is checked; make-model: the geometry is checked before anything is written", () => {
    const fx = join(dir, "fx");
    const e = hsm([
      "export",
      "--format",
      "xml",
      "--scored",
      join(fx, "scored.jsonl"),
      "--bank",
      join(fx, "bank.jsonl"),
      "--out",
      join(dir, "x"),
    ]);
    expect(e.status).toBe(2);
    expect(e.stderr).toMatch(/^hsm: Expected --format eee or foundry but received "xml"\n/);
    const m = hsm(["make-model", join(dir, "bad-model"), "--hidden", "6", "--heads", "4"]);
    expect(m.status).toBe(2);
    expect(m.stderr).toBe("hsm: Expected --hidden to be an even multiple of --heads per head, but 6 / 4 is not\n");
    expect(existsSync(join(dir, "bad-model"))).toBe(false);
  });

  it("--help shows the library's defaults", () => {
    const extract = hsm(["extract", "--help"]).stdout;
    expect(extract).toContain(`(default: ${DEFAULT_BATCH_SIZE})`);
    expect(extract).toContain(`(default: "${DEFAULT_LAYER_RULE}")`);
    expect(hsm(["generate", "--help"]).stdout).toMatch(
      new RegExp(`max_new_tokens ${MAX_NEW_TOKENS}[^]*tokens to generate at most \\(default: ${MAX_NEW_TOKENS}\\)`),
    );
    expect(hsm(["make-model", "--help"]).stdout).toContain(`weight seed (default: ${DEFAULT_TINY_MODEL.seed})`);
  });

  it("check-bank: summarizes a good bank and names the line and field of a bad one", () => {
    const ok = hsm(["check-bank", join(dir, "fx", "bank.jsonl")]);
    expect(ok.status).toBe(0);
    expect(ok.stdout).toMatch(/bank\.jsonl: 68 rows, 60 main-forward, 10 facts\n {2}anchor {11}10\n/);
    const bad = join(dir, "bad.jsonl");
    writeFileSync(
      bad,
      '{"query_id": "q1", "fact_id": "f", "condition_family": "anchor", "query": "x", "use_for_main_forward": "yes"}\n',
    );
    const r = hsm(["check-bank", bad]);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(`hsm: ${bad}:1: field "use_for_main_forward": expected true or false but received "yes"\n`);
  });

  it("fixture: refuses to overwrite, and writes nothing for bad flags", () => {
    const r = hsm(["fixture", join(dir, "fx")]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/already exists; choose a new folder/);
    const bad = hsm(["fixture", join(dir, "fx2"), "--d", "1"]);
    expect(bad.status).toBe(2);
    expect(existsSync(join(dir, "fx2"))).toBe(false);
  });

  it.each(["SIGINT", "SIGTERM"] as const)(
    "fixture: %s removes the hidden folder it builds in, and ends by the signal",
    async (sig) => {
      const parent = join(dir, `fixture-${sig}`);
      mkdirSync(parent);
      const child = spawn(
        process.execPath,
        [BIN, "fixture", join(parent, "fx"), "--facts", "3000", "--d", "512", "-q"],
        {
          stdio: "ignore",
        },
      );
      const exit = await new Promise<NodeJS.Signals | null>((resolve) => {
        const poll = setInterval(() => {
          // Once the folder holds its store folder, the fixture is being written.
          const work = readdirSync(parent).find((n) => n.startsWith(".fx.partial-"));
          if (work && existsSync(join(parent, work, "store"))) {
            clearInterval(poll);
            child.kill(sig);
          }
        }, 2);
        child.on("exit", (_code, signal) => {
          clearInterval(poll);
          resolve(signal);
        });
      });
      expect(exit).toBe(sig);
      expect(readdirSync(parent)).toEqual([]);
    },
  );

  it.skipIf(process.getuid?.() !== 0)(
    "make-model: a disk that fills names the folder, exit 1, and leaves nothing (needs root to mount a tmpfs)",
    () => {
      const mnt = mkdtempSync(join(tmpdir(), "hsm-make-model-full-"));
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt]);
      try {
        const r = hsm(["make-model", join(mnt, "m")]);
        expect(r.stderr).toBe(`hsm: ${join(mnt, "m")}: cannot be written: no space left on device (ENOSPC)\n`);
        expect(r.status).toBe(EXIT.data);
        expect(readdirSync(mnt)).toEqual([]);
      } finally {
        execFileSync("umount", ["--lazy", mnt]);
        rmSync(mnt, { recursive: true, force: true });
      }
    },
  );

  it("ends quietly when its reader closes the pipe early (hsm … | head)", () => {
    const r = spawnSync("/bin/sh", ["-c", `"${process.execPath}" "${BIN}" --help | head -c 1 > /dev/null`], {
      encoding: "utf8",
    });
    expect(r.status).toBe(0);
    expect(r.stderr).toBe("");
  });

  describe("a reader that closes a pipe early", () => {
    const model = join(dir, "pipe-model");
    const fx = join(dir, "fx");
    // `run` reports each step on stdout, `metrics` each layer on stderr.
    const commands = {
      run: (out: string) => ["run", "--model-dir", model, "--bank", join(fx, "bank.jsonl"), "--outputs", out],
      metrics: (out: string) => ["metrics", join(fx, "store"), "--scored", join(fx, "scored.jsonl"), "--out", out],
    };
    const line = (args: string[]) => [process.execPath, BIN, ...args].map((a) => `"${a}"`).join(" ");
    // The files of an output folder, the Every Eval Ever record's timestamp left out.
    const filesOf = (out: string) =>
      readdirSync(out, { recursive: true, encoding: "utf8" })
        .map((p) => p.replace(/_\d+(_samples)?\.json/, "_T$1.json"))
        .sort();
    const alone: Record<string, string[]> = {};
    beforeAll(async () => {
      expect(hsm(["make-model", model, "--layers", "2", "--hidden", "16"]).status).toBe(0);
      for (const [name, args] of Object.entries(commands)) {
        const out = join(dir, `pipe-alone-${name}`);
        expect((await hsmAsync(args(out))).status).toBe(0);
        alone[name] = filesOf(out);
      }
    }, 60_000);

    it.each([
      ["run", "stdout", "| head -c 1 > /dev/null"],
      ["run", "stdout and stderr", "2>&1 | head -c 1 > /dev/null"],
      ["metrics", "stderr", "2>&1 > /dev/null | head -c 1 > /dev/null"],
      ["metrics", "stdout and stderr", "2>&1 | head -c 1 > /dev/null"],
    ] as const)(
      "%s: on %s stops nothing, and the exit status is the command's",
      async (name, which, pipe) => {
        const out = join(dir, `pipe-${name}-${which.replace(/ /g, "-")}`);
        const r = await runChild("/bin/sh", ["-c", `${line(commands[name](out))} ${pipe}; echo "status $?" >&2`]);
        expect(r.stderr).toBe("status 0\n");
        expect(filesOf(out)).toEqual(alone[name]);
      },
      60_000,
    );
  });

  it.skipIf(!existsSync("/dev/full"))(
    "metrics: standard output on a full disk is named in one line, the files are written, and the status is 1",
    async () => {
      const out = join(dir, "stdout-full");
      const args = [BIN, "metrics", join(dir, "fx", "store"), "--scored", join(dir, "fx", "scored.jsonl")];
      const r = await runChild("/bin/sh", [
        "-c",
        `"${process.execPath}" "${args.join('" "')}" --out "${out}" -q > /dev/full`,
      ]);
      expect(r.stderr).toBe("hsm: standard output: cannot be written: no space left on device (ENOSPC)\n");
      expect(r.status).toBe(EXIT.data);
      expect(readdirSync(out).sort()).toEqual(["iss.csv", "iss.json", "iss.svg", "kts.csv", "kts.json", "kts.svg"]);
    },
  );

  it("study --shards: every printed command, the last included, reads back through a shell word for word", () => {
    const folder = join(dir, "a study's folder");
    mkdirSync(folder, { recursive: true });
    cpSync(join(dir, "fx", "bank.jsonl"), join(folder, "bank.jsonl"));
    const file = join(folder, "study.yaml");
    writeFileSync(
      file,
      "bank: bank.jsonl\noutputs: out\nrun: { commit_rows: 8 }\nmodels:\n  - { name: m, model_dir: model a }\n",
    );
    const r = hsm(["study", file, "--shards", "2"]);
    expect(r.stderr).toBe("");
    const lines = r.stdout.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
    expect(lines.at(-1)!.startsWith("then: ")).toBe(true);
    const words = (line: string) =>
      spawnSync("bash", ["-c", `printf '%s\\n' ${line.replace(/^then: /, "")}`], { encoding: "utf8" }).stdout.split(
        "\n",
      );
    expect(words(lines.at(-1)!)).toEqual(["hsm", "study", file, ""]);
    expect(words(lines.at(-2)!)).toEqual([
      "hsm",
      "merge",
      join(folder, "out", "hidden", "m"),
      ...["0", "1"].map((k) => join(folder, "out", "shards", "m", `${k}-of-2`)),
      "",
    ]);
  });

  it("layers: prints the stored blocks", () => {
    expect(hsm(["layers", "46"]).stdout).toBe(
      `28 of 46 layers (l/(L-1) >= 0.4): ${Array.from({ length: 28 }, (_, i) => i + 18).join(", ")}\n`,
    );
  });

  it("works without the native core, and says so once", () => {
    const r = hsm(["verify", join(dir, "fx", "store")], { HSM_NATIVE_PATH: join(dir, "missing.node") });
    expect(r.status).toBe(0);
    expect(r.stderr.match(/the native core is not loaded/g)).toHaveLength(1);
    expect(r.stderr).toContain("npm run build:native");
  });

  it("demo: runs the whole pipeline on the embedded default, then skips what is done", async () => {
    const first = await hsmAsync(["demo", "--out", join(dir, "demo"), "--quiet"]);
    expect(first.stderr).toBe("");
    expect(first.status).toBe(0);
    expect(first.stdout).toMatch(/^model: .*demo\/model — 6 layers, d_model 96, .* it knows 17 of their 20 facts/m);
    expect(first.stdout).toMatch(/^generate: 125 queries answered/m);
    expect(first.stdout).toMatch(/^score: 125 rows: /m);
    expect(first.stdout).toMatch(/^extract: 120 rows/m);
    expect(first.stdout).toMatch(/^verify: 4 files, checksums match$/m);
    expect(first.stdout).toMatch(/^ISS \(fact-macro margin/m);
    expect(first.stdout).toMatch(/^KTS \(1: the anchor probe/m);
    expect(first.stdout).toContain(
      `plots: ${join(dir, "demo", "metrics", "tiny-llama", "iss.svg")}, ${join(dir, "demo", "metrics", "tiny-llama", "kts.svg")}`,
    );
    for (const f of [
      "evaluation/tiny-llama.jsonl",
      "evaluation/tiny-llama.scored.jsonl",
      "hidden/tiny-llama/index.json",
      "metrics/tiny-llama/iss.json",
      "foundry/tiny-llama.jsonl",
    ]) {
      expect(existsSync(join(dir, "demo", f))).toBe(true);
    }
    expect(first.stdout.trimEnd().split("\n").at(-1)).toBe(`report: ${join(dir, "demo", "report.html")}`);
    expect(first.stdout).toMatch(
      /^The model answers 85% of the anchor questions right, .* translation 60%, typo 25%; ISS/m,
    );
    expect(first.stdout).toMatch(/^KTS shows how much of a correctness probe trained on the anchors still works/m);
    // What the demo is for: a model that knows most anchors, loses more to translation than to paraphrase,
    // and is right and wrong on every family, so that KTS has a number in every cell.
    const bank = new Map(
      readFileSync(join(import.meta.dirname, "..", "..", "data", "demo-bank.jsonl"), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { query_id: string; condition_family: string })
        .map((r) => [r.query_id, r.condition_family]),
    );
    const right = new Map<string, number[]>();
    for (const line of readFileSync(join(dir, "demo", "evaluation", "tiny-llama.scored.jsonl"), "utf8")
      .trim()
      .split("\n")) {
      const r = JSON.parse(line) as { query_id: string; label: string };
      const family = bank.get(r.query_id)!;
      right.set(family, [...(right.get(family) ?? []), r.label === "correct" ? 1 : 0]);
    }
    const accuracy = (f: string) => right.get(f)!.reduce((a, b) => a + b, 0) / right.get(f)!.length;
    expect(accuracy("anchor")).toBeGreaterThanOrEqual(0.8);
    expect(accuracy("translation")).toBeLessThan(accuracy("paraphrase"));
    const kts = JSON.parse(readFileSync(join(dir, "demo", "metrics", "tiny-llama", "kts.json"), "utf8")) as {
      rows: { layer: number; family: string; kts: number | null }[];
    };
    const cells = kts.rows.filter((r) => r.family !== "anchor");
    expect(cells).toHaveLength(4 * 6);
    expect(cells.filter((r) => typeof r.kts !== "number")).toEqual([]);
    expect(readFileSync(join(dir, "demo", "report.html"), "utf8")).toContain("<title>hsm report — tiny-llama</title>");
    const second = await hsmAsync(["demo", "--out", join(dir, "demo"), "--quiet"]);
    expect(second.status).toBe(0);
    expect(second.stdout).toMatch(/^model: .* exists, skipped$/m);
    expect(second.stdout).toMatch(/^generate: all 125 queries already answered, skipped$/m);
    expect(second.stdout).toMatch(/^score: up to date, skipped$/m);
    expect(second.stdout).toMatch(/^extract: store complete, skipped$/m);
  });
});

describe("exit statuses", () => {
  const stderr: string[] = [];
  afterEach(() => {
    vi.restoreAllMocks();
    stderr.length = 0;
  });
  const capture = () =>
    vi.spyOn(process.stderr, "write").mockImplementation((chunk) => (stderr.push(String(chunk)), true));

  it("an HsmError exits with its own status and message: data 1, usage 2", () => {
    capture();
    expect(exitStatusFor(new HsmError("bank.jsonl:3: bad"))).toBe(1);
    expect(exitStatusFor(new UsageError("Expected --x"))).toBe(2);
    expect(stderr).toEqual(["hsm: bank.jsonl:3: bad\n", "hsm: Expected --x\n"]);
  });

  it("anything else is a bug in hsm: status 3, 'unexpected error', and the HSM_DEBUG hint or the stack", () => {
    capture();
    vi.stubEnv("HSM_DEBUG", "");
    expect(exitStatusFor(new TypeError("x is undefined"))).toBe(EXIT.internal);
    expect(EXIT.internal).toBe(3);
    expect(stderr).toEqual(["hsm: unexpected error: x is undefined\n", "(set HSM_DEBUG=1 for a stack trace)\n"]);
    stderr.length = 0;
    vi.stubEnv("HSM_DEBUG", "1");
    expect(exitStatusFor(new RangeError("boom"))).toBe(3);
    expect(stderr[1]).toMatch(/^RangeError: boom\n {4}at /);
    vi.unstubAllEnvs();
  });
});

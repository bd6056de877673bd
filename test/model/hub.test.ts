/**
 * Models named by hub id (`hf:ORG/NAME[@REVISION]`), fetched from a hub served here on the loopback address: the
 * routes the hub answers (a revision's commit, a commit's file tree, a file's resolve route with an LFS redirect and
 * Range requests) are played by a small HTTP server over a tiny model's files. No test reaches the internet.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { homedir, hostname } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";

import { exportScored } from "../../src/export/export.js";
import { extract } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { fetchHubModel } from "../../src/model/hub.js";
import { openModelDir } from "../../src/model/model-dir.js";
import { scoreFile } from "../../src/score/score-file.js";
import { parseStudy } from "../../src/study/study-file.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { runChild } from "../helpers/child.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-hub-");
const flat = join(dir, "flat");
const bank = join(dir, "bank.jsonl");
const COMMIT = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
const REPO = "hsm-test/tiny";

interface RepoFile {
  bytes: Buffer;
  lfs: boolean;
}
/** The repository's files by path, as the hub would hold them. */
const files = new Map<string, RepoFile>();

/** What the server was asked, and knobs for the next requests. */
interface Hub {
  url: string;
  requests: { path: string; range?: string; auth?: string }[];
  /** Bytes of LFS content sent, by sha256. */
  sent: Map<string, number>;
  /** Paths whose next download is cut after this many bytes. */
  cut: Map<string, number>;
  /** Paths served with one byte changed. */
  corrupt: Set<string>;
  /** The token every request must carry, where set. */
  token?: string;
  /** With `token`: only the files need it, as with a gated model, whose API answers anyone. */
  gated?: boolean;
  /** Paths whose next download sends its first KiB, then the rest once the promise settles (a stalled link). */
  stall: Map<string, Promise<void>>;
  /** Downloads of each path under way now, and the most there were at once. */
  open: Map<string, { now: number; most: number }>;
}
let hub: Hub;

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const gitSha1 = (b: Buffer) =>
  createHash("sha1")
    .update(Buffer.concat([Buffer.from(`blob ${b.length}\0`), b]))
    .digest("hex");

function serve(res: ServerResponse, status: number, headers: Record<string, string | number>, body: Buffer | string) {
  res.writeHead(status, headers);
  res.end(body);
}

/** Sends `bytes` honouring a `Range: bytes=N-` header; a path in `hub.cut` is cut off after its byte count. */
function sendContent(req: IncomingMessage, res: ServerResponse, path: string, bytes: Buffer, etag: string) {
  if (hub.corrupt.has(path)) {
    bytes = Buffer.from(bytes);
    bytes[bytes.length >> 1] = bytes[bytes.length >> 1]! ^ 0xff;
  }
  const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
  const start = m ? Number(m[1]) : 0;
  const body = bytes.subarray(start);
  const headers: Record<string, string | number> = {
    "Content-Length": body.length,
    "Accept-Ranges": "bytes",
    ETag: `"${etag}"`,
    "X-Repo-Commit": COMMIT,
  };
  if (m) headers["Content-Range"] = `bytes ${start}-${bytes.length - 1}/${bytes.length}`;
  res.writeHead(m ? 206 : 200, headers);
  hub.sent.set(etag, (hub.sent.get(etag) ?? 0) + body.length);
  const open = hub.open.get(path) ?? { now: 0, most: 0 };
  hub.open.set(path, { now: open.now + 1, most: Math.max(open.most, open.now + 1) });
  res.on("close", () => hub.open.get(path)!.now--);
  const stall = hub.stall.get(path);
  if (stall) {
    hub.stall.delete(path);
    res.write(body.subarray(0, 1024));
    void stall.then(() => res.end(body.subarray(1024)));
    return;
  }
  const cut = hub.cut.get(path);
  if (cut !== undefined) {
    hub.cut.delete(path);
    // The connection closes short of its Content-Length once the client has had time to take the bytes sent (a
    // stream errored at once would drop the chunks still queued in it).
    res.write(body.subarray(0, cut), () => setTimeout(() => res.socket?.end(), 300));
    return;
  }
  res.end(body);
}

function handle(req: IncomingMessage, res: ServerResponse) {
  const url = new URL(req.url!, hub.url);
  const path = decodeURIComponent(url.pathname);
  hub.requests.push({ path, range: req.headers.range, auth: req.headers.authorization });
  if (hub.token && !(hub.gated && path.startsWith("/api/")) && req.headers.authorization !== `Bearer ${hub.token}`)
    return serve(res, 401, { "Content-Type": "application/json" }, JSON.stringify({ error: "Invalid credentials" }));
  const revision = new RegExp(`^/api/models/${REPO}/revision/(.+)$`).exec(path);
  if (revision) {
    if (revision[1] !== "main" && revision[1] !== COMMIT)
      return serve(res, 404, { "Content-Type": "application/json" }, JSON.stringify({ error: "Revision Not Found" }));
    const info = {
      _id: "0",
      id: REPO,
      sha: COMMIT,
      private: false,
      downloads: 0,
      likes: 0,
      lastModified: "2026-01-01",
    };
    return serve(res, 200, { "Content-Type": "application/json" }, JSON.stringify(info));
  }
  if (path === `/api/models/${REPO}/tree/${COMMIT}`) {
    const tree = [...files].map(([p, f]) => ({
      type: "file",
      path: p,
      size: f.bytes.length,
      oid: f.lfs
        ? gitSha1(Buffer.from(`version https://git-lfs.github.com/spec/v1\noid sha256:${sha256(f.bytes)}\n`))
        : gitSha1(f.bytes),
      ...(f.lfs ? { lfs: { oid: sha256(f.bytes), size: f.bytes.length, pointerSize: 130 } } : {}),
    }));
    return serve(res, 200, { "Content-Type": "application/json" }, JSON.stringify(tree));
  }
  const resolve = new RegExp(`^/${REPO}/resolve/${COMMIT}/(.+)$`).exec(path);
  const file = resolve ? files.get(resolve[1]!) : undefined;
  if (resolve && file) {
    // LFS files are redirected to their content by hash, as the hub sends them to its CDN.
    if (file.lfs)
      return serve(res, 302, { Location: `/cdn/${resolve[1]}?sha=${sha256(file.bytes)}`, "X-Repo-Commit": COMMIT }, "");
    return sendContent(req, res, resolve[1]!, file.bytes, gitSha1(file.bytes));
  }
  const cdn = /^\/cdn\/(.+)$/.exec(path);
  if (cdn && files.get(cdn[1]!))
    return sendContent(req, res, cdn[1]!, files.get(cdn[1]!)!.bytes, url.searchParams.get("sha")!);
  serve(res, 404, { "X-Error-Code": "EntryNotFound" }, "not found");
}

const savedEnv = { ...process.env };
const HF_VARIABLES = [
  "HF_HUB_CACHE",
  "HUGGINGFACE_HUB_CACHE",
  "HF_HOME",
  "XDG_CACHE_HOME",
  "HF_ENDPOINT",
  "HF_TOKEN",
  "HF_TOKEN_PATH",
  "HF_HUB_OFFLINE",
];
/** Points the hub cache, home and endpoint at this test's; `more` sets other variables. */
function useCache(cache: string, more: Record<string, string> = {}) {
  for (const k of HF_VARIABLES) delete process.env[k];
  // HF_HOME too, so that no token of this machine's own login is sent.
  Object.assign(process.env, { HF_HUB_CACHE: cache, HF_HOME: join(dir, "home"), HF_ENDPOINT: hub.url, ...more });
}

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const downloads = () => hub.requests.filter((r) => !r.path.startsWith("/api/"));
const storage = (cache: string) => join(cache, `models--${REPO.replace("/", "--")}`);

beforeAll(async () => {
  await writeTinyModel(flat, {
    layers: 2,
    hidden: 32,
    heads: 4,
    kvHeads: 2,
    withPast: true,
    externalData: true,
    tokenizer: "llama3.1-1k",
    seed: 11,
  });
  for (const name of readdirSync(flat)) {
    const bytes = readFileSync(join(flat, name));
    const onnx = name.startsWith("model.onnx");
    files.set(onnx ? `onnx/${name}` : name, { bytes, lfs: onnx || name === "tokenizer.json" });
  }
  // A second variant and a file no run reads: neither is fetched.
  files.set("onnx/model_q4.onnx", { bytes: Buffer.from("not fetched"), lfs: true });
  files.set("README.md", { bytes: Buffer.from("# tiny\n"), lfs: false });
  const server = createServer(handle);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  hub = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: [],
    sent: new Map(),
    cut: new Map(),
    corrupt: new Set(),
    stall: new Map(),
    open: new Map(),
  };
  afterAll(() => {
    server.close();
    process.env = savedEnv;
  });
  const lines = Array.from({ length: 8 }, (_, i) =>
    JSON.stringify({
      query_id: `q${i}`,
      fact_id: `f${i >> 1}`,
      condition_family: i % 2 ? "typo" : "anchor",
      query: `${["What is the capital of France?", "Who wrote Don Quixote?"][i % 2]} (${i})`,
      use_for_main_forward: true,
      answers: ["x"],
    }),
  );
  writeFileSync(bank, lines.join("\n") + "\n");
});

beforeEach(() => {
  hub.requests = [];
  hub.sent = new Map();
  hub.token = undefined;
  hub.gated = false;
});

describe("a model named by hub id", () => {
  const cache = join(dir, "cache");
  const id = `hf:${REPO}`;

  it("extracts and generates exactly as the same files on disk, recording the commit", async () => {
    useCache(cache);
    const local = await extract({ modelDir: flat, bank, out: join(dir, "s-flat"), model: "tiny", batchSize: 4 });
    const remote = await extract({ modelDir: id, bank, out: join(dir, "s-hub"), model: "tiny", batchSize: 4 });
    expect(remote.manifest.model_source).toBe(`hf:${REPO}@${COMMIT}`);
    expect(local.manifest.model_source).toBeUndefined();
    expect(remote.manifest.model_sha256).toBe(local.manifest.model_sha256);
    for (const name of Object.keys(local.manifest.files))
      expect(readFileSync(join(dir, "s-hub", name))).toEqual(readFileSync(join(dir, "s-flat", name)));

    const outs = [join(dir, "g-flat.jsonl"), join(dir, "g-hub.jsonl")];
    for (const [k, m] of [flat, id].entries())
      await generate({ modelDir: m, bank, out: outs[k]!, model: "tiny", batchSize: 4, maxNewTokens: 5 });
    const rows = outs.map((o) =>
      readFileSync(o, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l)),
    );
    expect(rows[1]!.every((r) => r.model_source === `hf:${REPO}@${COMMIT}`)).toBe(true);
    expect(rows[1]!.map(({ model_source: _, ...r }) => r)).toEqual(rows[0]);
  });

  it("carries the commit through scoring into the Every Eval Ever record", async () => {
    const scored = join(dir, "g-hub.scored.jsonl");
    await scoreFile({ bank, generations: join(dir, "g-hub.jsonl"), out: scored });
    const first = JSON.parse(readFileSync(scored, "utf8").split("\n")[0]!);
    expect(first.model_source).toBe(`hf:${REPO}@${COMMIT}`);
    const r = await exportScored({ format: "eee", scored, bank, out: join(dir, "eee"), modelId: REPO });
    const aggregate = JSON.parse(
      readFileSync(
        r.files.find((f) => f.endsWith(".json"))!,
        "utf8",
      ),
    );
    expect(aggregate.model_info.additional_details).toEqual({ model_source: `hf:${REPO}@${COMMIT}` });
  });

  it("is cached as Python's huggingface_hub lays it out, with only the files a run needs", () => {
    const s = storage(cache);
    expect(readFileSync(join(s, "refs", "main"), "utf8")).toBe(COMMIT);
    const snapshot = join(s, "snapshots", COMMIT);
    const graph = join(snapshot, "onnx", "model.onnx");
    expect(lstatSync(graph).isSymbolicLink()).toBe(true);
    expect(readlinkSync(graph)).toBe(join("..", "..", "..", "blobs", sha256(files.get("onnx/model.onnx")!.bytes)));
    expect(readlinkSync(join(snapshot, "config.json"))).toBe(
      join("..", "..", "blobs", gitSha1(files.get("config.json")!.bytes)),
    );
    expect(readdirSync(join(snapshot, "onnx")).sort()).toEqual(["model.onnx", "model.onnx_data"]);
    expect(readdirSync(snapshot).sort()).toEqual(["config.json", "onnx", "tokenizer.json", "tokenizer_config.json"]);
    expect(readdirSync(join(s, "blobs")).every((n) => /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(n))).toBe(true);
  });

  it("downloads nothing a second time: two API calls, no file", async () => {
    useCache(cache);
    const md = await openModelDir(id);
    expect(md.onnxPath).toBe(join(storage(cache), "snapshots", COMMIT, "onnx", "model.onnx"));
    expect(downloads()).toEqual([]);
    expect(hub.requests.map((r) => r.path)).toEqual([
      `/api/models/${REPO}/revision/main`,
      `/api/models/${REPO}/tree/${COMMIT}`,
    ]);
  });

  it("with HF_HUB_OFFLINE=1 reads a warm cache without a request and refuses a cold one in one line", async () => {
    useCache(cache, { HF_HUB_OFFLINE: "1" });
    expect((await openModelDir(id)).source).toBe(`hf:${REPO}@${COMMIT}`);
    expect((await openModelDir(`${id}@${COMMIT}`)).dir).toBe(join(storage(cache), "snapshots", COMMIT));
    expect(hub.requests).toEqual([]);
    const cold = join(dir, "cold");
    useCache(cold, { HF_HUB_OFFLINE: "1" });
    const err = await openModelDir(id).catch((e: Error) => e);
    expect((err as Error).message).toBe(
      `${id}: not in the hub cache (${join(storage(cold), "refs", "main")} is missing); ` +
        "HF_HUB_OFFLINE=1 forbids downloading it: run once without HF_HUB_OFFLINE to fill the cache",
    );
    expect(hub.requests).toEqual([]);
  });

  it("finds the cache where huggingface_hub does: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub", async () => {
    const snapshot = join(storage(cache), "snapshots", COMMIT);
    // huggingface_hub's precedence: HF_HUB_CACHE over its older name HUGGINGFACE_HUB_CACHE, both over HF_HOME.
    useCache(cache, { HF_HUB_OFFLINE: "1", HUGGINGFACE_HUB_CACHE: join(dir, "not-this"), HF_HOME: join(dir, "nor") });
    expect((await openModelDir(id)).dir).toBe(snapshot);
    useCache(cache, { HF_HUB_OFFLINE: "1", HUGGINGFACE_HUB_CACHE: cache, HF_HOME: join(dir, "nor") });
    delete process.env.HF_HUB_CACHE;
    expect((await openModelDir(id)).dir).toBe(snapshot);
    useCache(cache, { HF_HUB_OFFLINE: "1", HF_HOME: dir });
    delete process.env.HF_HUB_CACHE;
    const err = (await openModelDir(id).catch((e: Error) => e)) as Error;
    expect(err.message).toContain(join(dir, "hub", `models--${REPO.replace("/", "--")}`, "refs", "main"));
    expect(hub.requests).toEqual([]);
  });

  it("reads a leading ~ in the hub's variables as the home folder, as huggingface_hub does", async () => {
    // Set where no shell expands it (a Dockerfile's ENV, a .env file); Python's expanduser reads it as $HOME.
    const home = homedir();
    for (const [name, value, where] of [
      ["HF_HUB_CACHE", "~/hsm-hub-test-cache", join(home, "hsm-hub-test-cache")],
      ["HUGGINGFACE_HUB_CACHE", "~/hsm-hub-test-cache", join(home, "hsm-hub-test-cache")],
      ["HF_HOME", "~/hsm-hub-test-home", join(home, "hsm-hub-test-home", "hub")],
    ] as const) {
      useCache(cache, { HF_HUB_OFFLINE: "1", [name]: value });
      if (name !== "HF_HUB_CACHE") delete process.env.HF_HUB_CACHE;
      const err = (await openModelDir(id).catch((e: Error) => e)) as Error;
      expect(err.message, name).toContain(
        `(${join(where, `models--${REPO.replace("/", "--")}`, "refs", "main")} is missing)`,
      );
    }
    expect(existsSync(join(home, "hsm-hub-test-cache"))).toBe(false);
  });

  it("resumes an interrupted download with a Range request", async () => {
    const fresh = join(dir, "resume");
    useCache(fresh);
    const data = files.get("onnx/model.onnx_data")!.bytes;
    hub.cut.set("onnx/model.onnx_data", 3000);
    await expect(openModelDir(id)).rejects.toThrow(/the download of onnx\/model\.onnx_data stopped after \d+ of/);
    const partial = join(storage(fresh), "blobs", `${sha256(data)}.incomplete`);
    const have = statSync(partial).size;
    expect(have).toBeGreaterThan(0);
    expect(have).toBeLessThanOrEqual(3000);
    hub.requests = [];
    hub.sent = new Map();
    const md = await openModelDir(id);
    expect(hub.requests.find((r) => r.path.endsWith("model.onnx_data") && r.path.startsWith("/cdn/"))?.range).toBe(
      `bytes=${have}-`,
    );
    expect(hub.sent.get(sha256(data))).toBe(data.length - have);
    expect(sha256(readFileSync(join(md.dir, "onnx", "model.onnx_data")))).toBe(sha256(data));
    expect(existsSync(partial)).toBe(false);
  });

  it("refuses a file whose hash differs, in one line naming it, and keeps nothing of it", async () => {
    for (const [path, kind] of [
      ["onnx/model.onnx", "sha256"],
      ["tokenizer_config.json", "git blob sha1"],
    ] as const) {
      const fresh = join(dir, `corrupt-${kind.length}`);
      useCache(fresh);
      hub.corrupt = new Set([path]);
      const err = (await openModelDir(id).catch((e: Error) => e)) as Error;
      const f = files.get(path)!;
      expect(err.message).toMatch(
        new RegExp(
          `^${path}: the downloaded file's ${kind} is [0-9a-f]+ but the hub lists ${f.lfs ? sha256(f.bytes) : gitSha1(f.bytes)}; removed, run again$`,
        ),
      );
      expect(
        readdirSync(join(storage(fresh), "blobs")).some((n) => n.includes(f.lfs ? sha256(f.bytes) : gitSha1(f.bytes))),
      ).toBe(false);
      hub.corrupt = new Set();
    }
  });

  it("shows the progress of a large file on stderr, and of small ones nothing", async () => {
    files.set("onnx/model_big.onnx", { bytes: Buffer.from("a graph"), lfs: true });
    files.set("onnx/model_big.onnx_data", { bytes: Buffer.alloc(9 * 2 ** 20, 7), lfs: true });
    useCache(join(dir, "big"));
    const lines: string[] = [];
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk) => {
      lines.push(String(chunk));
      return true;
    });
    try {
      expect((await fetchHubModel(id, { modelFile: "model_big.onnx" })).graph).toBe("onnx/model_big.onnx");
      // Offline, the cache finds the same graph by the same name.
      useCache(join(dir, "big"), { HF_HUB_OFFLINE: "1" });
      expect((await fetchHubModel(id, { modelFile: "model_big.onnx" })).graph).toBe("onnx/model_big.onnx");
    } finally {
      spy.mockRestore();
      files.delete("onnx/model_big.onnx");
      files.delete("onnx/model_big.onnx_data");
    }
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^downloading onnx\/model_big\.onnx_data: 9 MiB in \d+\.\d s\n$/);
  });

  it("offline, runs a repository's only graph of another name, as online", async () => {
    const saved = new Map(files);
    files.clear();
    for (const name of ["config.json", "tokenizer.json", "tokenizer_config.json"]) files.set(name, saved.get(name)!);
    // Older optimum exports name their one graph decoder_model.onnx.
    files.set("decoder_model.onnx", { bytes: Buffer.from("a graph"), lfs: true });
    const only = join(dir, "only");
    try {
      useCache(only);
      expect((await fetchHubModel(id)).graph).toBe("decoder_model.onnx");
      useCache(only, { HF_HUB_OFFLINE: "1" });
      expect((await fetchHubModel(id)).graph).toBe("decoder_model.onnx");
      // Two graphs in the snapshot, and no default: online would refuse the repository too.
      files.set("onnx/decoder_model.onnx", { bytes: Buffer.from("another"), lfs: true });
      useCache(only);
      await fetchHubModel(id, { modelFile: "onnx/decoder_model.onnx" });
      useCache(only, { HF_HUB_OFFLINE: "1" });
      await expect(fetchHubModel(id)).rejects.toThrow(
        `${id}: the cache holds several graphs (decoder_model.onnx, onnx/decoder_model.onnx); pick one with --model-file`,
      );
    } finally {
      files.clear();
      for (const [k, v] of saved) files.set(k, v);
    }
  });

  it("lets two runs sharing a cache fetch each file once, and takes over locks of runs that are gone", async () => {
    const shared = join(dir, "shared");
    useCache(shared);
    const data = sha256(files.get("onnx/model.onnx_data")!.bytes);
    mkdirSync(join(storage(shared), "blobs"), { recursive: true });
    const lockOf = (host: string, pid: number) => JSON.stringify({ pid, host, started: "2026-01-01T00:00:00.000Z" });
    // This machine's lock, naming a process that does not run.
    writeFileSync(join(storage(shared), "blobs", `${data}.lock`), lockOf(hostname(), 2147483646));
    // Another machine's lock, untouched for eleven minutes (its holder touches it every minute): its run is gone.
    const other = join(storage(shared), "blobs", `${sha256(files.get("tokenizer.json")!.bytes)}.lock`);
    writeFileSync(other, lockOf("another-host", 1));
    utimesSync(other, new Date(Date.now() - 660_000), new Date(Date.now() - 660_000));
    const [a, b] = await Promise.all([fetchHubModel(id), fetchHubModel(id)]);
    expect(b).toEqual(a);
    for (const [path, f] of files)
      if (f.lfs && (path.startsWith("onnx/model.onnx") || path === "tokenizer.json"))
        expect(hub.sent.get(sha256(f.bytes))).toBe(f.bytes.length);
    expect(readdirSync(join(storage(shared), "blobs")).filter((n) => !/^[0-9a-f]+$/.test(n))).toEqual([]);
  });

  // A run in a process of its own (`host` set: one that takes this machine for that host), fetching the model into
  // `cache`; it prints "fetched" or its error.
  const runAlone = (cache: string, host?: string) => {
    const child = join(dir, "hub-child.mjs");
    const module = pathToFileURL(join(import.meta.dirname, "..", "..", "dist", "model", "hub.js")).href;
    writeFileSync(
      child,
      `import { fetchHubModel } from ${JSON.stringify(module)};\n` +
        `await fetchHubModel(${JSON.stringify(id)}).then(() => console.log("fetched"), (e) => console.log(e.message));\n`,
    );
    const fake = `import os from "node:os"; import { syncBuiltinESMExports } from "node:module"; os.hostname = () => ${JSON.stringify(host)}; syncBuiltinESMExports();`;
    const env = { ...process.env, HF_HUB_CACHE: cache, HF_HOME: join(dir, "home"), HF_ENDPOINT: hub.url };
    return runChild(process.execPath, [...(host ? ["--import", `data:text/javascript,${fake}`] : []), child], { env });
  };

  // A download stalled for two minutes (its lock and its partial file untouched as long) by a run that still runs,
  // on this machine or another: a second run waits for it rather than writing the same file beside it.
  for (const hosts of [[], ["node-a", "node-b"]] as const)
    it(`never lets two runs write one file, when a download stalls (${hosts.length ? "two hosts" : "one host"})`, async () => {
      const shared = join(dir, `stall-${hosts.length}`);
      const path = "onnx/model.onnx_data";
      const data = files.get(path)!.bytes;
      const blob = join(storage(shared), "blobs", sha256(data));
      let resume = () => {};
      hub.stall.set(path, new Promise<void>((r) => (resume = r)));
      hub.open.delete(path);
      const until = async (done: () => boolean, ms: number) => {
        for (const t = Date.now(); !done() && Date.now() - t < ms;) await new Promise((r) => setTimeout(r, 50));
      };
      const first = runAlone(shared, hosts[0]);
      await until(() => (existsSync(`${blob}.incomplete`) ? statSync(`${blob}.incomplete`).size > 0 : false), 30_000);
      const ago = new Date(Date.now() - 120_000);
      for (const p of [`${blob}.lock`, `${blob}.incomplete`]) utimesSync(p, ago, ago);
      const second = runAlone(shared, hosts[1]);
      // Time for the second run to reach the file: a run that would write it asks the hub for it.
      await until(() => hub.open.get(path)!.most > 1, 3000);
      resume();
      const outs = await Promise.all([first, second]);
      expect(outs.map((o) => o.stdout)).toEqual(["fetched\n", "fetched\n"]);
      expect(outs[0]!.stderr).toBe("");
      // The run waiting says for whom, and what to do were that run gone.
      const holder = `pid \\d+ on ${hosts[0] ?? hostname()}, since [\\d:.TZ-]+`;
      expect(outs[1]!.stderr).toMatch(
        new RegExp(
          `^${literal(path)}: waiting for another run to download it \\(${holder}\\); ` +
            `if it is gone, delete ${literal(blob)}\\.lock\n$`,
        ),
      );
      expect(hub.open.get(path)!.most).toBe(1);
      expect(sha256(readFileSync(blob))).toBe(sha256(data));
      expect(readdirSync(join(storage(shared), "blobs")).filter((n) => !/^[0-9a-f]+$/.test(n))).toEqual([]);
    });

  it("lets runs that find every file in the cache link them into a new snapshot at once", async () => {
    // As for a new commit that changed no file a run reads: the blobs are there, the snapshot's links are not.
    const warm = join(dir, "warm");
    useCache(warm);
    await fetchHubModel(id);
    rmSync(join(storage(warm), "snapshots"), { recursive: true });
    hub.requests = [];
    const runs = await Promise.all(Array.from({ length: 4 }, () => fetchHubModel(id)));
    expect(runs.map((r) => r.dir)).toEqual(Array(4).fill(join(storage(warm), "snapshots", COMMIT)));
    expect(downloads()).toEqual([]);
    for (const path of ["config.json", "tokenizer.json", "onnx/model.onnx", "onnx/model.onnx_data"])
      expect(readFileSync(join(runs[0]!.dir, path))).toEqual(files.get(path)!.bytes);
  });

  it("sends HF_TOKEN, and says what is missing without it", async () => {
    const fresh = join(dir, "token");
    hub.token = "hf_secret";
    useCache(fresh);
    await expect(openModelDir(id)).rejects.toThrow(
      `${id}: the hub at ${hub.url} refused its revision (HTTP 401: Invalid credentials); a gated or private model needs HF_TOKEN`,
    );
    useCache(fresh, { HF_TOKEN: "hf_secret" });
    expect((await openModelDir(id)).source).toBe(`hf:${REPO}@${COMMIT}`);
    expect(hub.requests.filter((r) => r.auth === "Bearer hf_secret").length).toBeGreaterThan(2);
  });

  it("sends the token huggingface_hub would: HF_TOKEN, else the login's token file", async () => {
    const home = join(dir, "hf-home");
    mkdirSync(home, { recursive: true });
    writeFileSync(join(home, "token"), "hf_secret\n");
    writeFileSync(join(dir, "other-token"), "hf_other");
    hub.token = "hf_secret";
    useCache(join(dir, "token-file"), { HF_HOME: home });
    expect((await openModelDir(id)).source).toBe(`hf:${REPO}@${COMMIT}`);
    expect(hub.requests.every((r) => r.auth === "Bearer hf_secret")).toBe(true);
    // HF_TOKEN_PATH names the file instead, and HF_TOKEN wins over either.
    hub.requests = [];
    useCache(join(dir, "token-file"), { HF_HOME: home, HF_TOKEN_PATH: join(dir, "other-token") });
    await expect(openModelDir(id)).rejects.toThrow(/HTTP 401/);
    expect(hub.requests.map((r) => r.auth)).toEqual(["Bearer hf_other"]);
    useCache(join(dir, "token-file"), {
      HF_HOME: home,
      HF_TOKEN_PATH: join(dir, "other-token"),
      HF_TOKEN: "hf_secret",
    });
    expect((await openModelDir(id)).source).toBe(`hf:${REPO}@${COMMIT}`);
    // A value that is no hub token is named where it came from, not taken for an unreachable hub.
    for (const [more, where] of [
      [{ HF_TOKEN: "secret" }, "HF_TOKEN"],
      [{ HF_TOKEN_PATH: join(dir, "bad-token") }, join(dir, "bad-token")],
    ] as const) {
      writeFileSync(join(dir, "bad-token"), "secret\n");
      useCache(join(dir, "token-file"), more);
      await expect(openModelDir(id)).rejects.toThrow(
        `${where}: not a Hugging Face access token (one starts with "hf_")`,
      );
    }
  });

  it("says a gated model's files need HF_TOKEN, though its API answers without one", async () => {
    const fresh = join(dir, "gated");
    Object.assign(hub, { token: "hf_secret", gated: true });
    useCache(fresh);
    const err = (await openModelDir(id).catch((e: Error) => e)) as Error;
    expect(err.message).toMatch(/: the hub answered HTTP 401 for [\w./]+; a gated or private model needs HF_TOKEN$/);
    expect(readdirSync(join(storage(fresh), "blobs"))).toEqual([]);
    expect(existsSync(join(storage(fresh), "snapshots"))).toBe(false);
    // A token the hub refuses is not a missing one.
    useCache(fresh, { HF_TOKEN: "hf_expired" });
    await expect(openModelDir(id)).rejects.toThrow(
      /HTTP 401 for [\w./]+; the token sent was refused: it may have expired, or its account has no access/,
    );
    useCache(fresh, { HF_TOKEN: "hf_secret" });
    expect((await openModelDir(id)).source).toBe(`hf:${REPO}@${COMMIT}`);
  });

  it("names a missing revision, the graphs to choose from, and a malformed id", async () => {
    useCache(join(dir, "errors"));
    await expect(openModelDir(`${id}@v9`)).rejects.toThrow(/refused its revision \(HTTP 404: Revision Not Found\)/);
    await expect(openModelDir(id, "model_fp16.onnx")).rejects.toThrow(
      `${id}: has no graph model_fp16.onnx; it holds onnx/model.onnx, onnx/model_q4.onnx`,
    );
    await expect(openModelDir("hf:a/b/c")).rejects.toThrow("hf:a/b/c: not a hub model id");
  });

  it("runs from the command line: inspect-model online, and a cold offline cache in one line", async () => {
    const bin = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
    // Spawned without blocking: the hub these commands talk to is served by this process.
    const hsm = (args: string[], env: Record<string, string>) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
        execFile(process.execPath, [bin, ...args], { env: { ...process.env, ...env } }, (err, stdout, stderr) =>
          done({ code: err ? Number(err.code) : 0, stdout, stderr }),
        );
      });
    const ok = await hsm(["inspect-model", id], { HF_HUB_CACHE: cache, HF_ENDPOINT: hub.url });
    expect(ok.stderr).toBe("");
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(`${id}: 2 decoder blocks, d_model 32`);
    const cold = join(dir, "cold-cli");
    const r = await hsm(["extract", "--model-dir", id, "--bank", bank, "--out", join(dir, "never")], {
      HF_HUB_CACHE: cold,
      HF_HUB_OFFLINE: "1",
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `hsm: ${id}: not in the hub cache (${join(storage(cold), "refs", "main")} is missing); ` +
        "HF_HUB_OFFLINE=1 forbids downloading it: run once without HF_HUB_OFFLINE to fill the cache\n",
    );
  });

  it("stands in a study file as it is, not as a path", () => {
    const study = parseStudy(
      `bank: bank.jsonl\nmodels:\n  - {name: tiny, model_dir: "${id}@main"}\n`,
      join(dir, "s.yaml"),
    );
    expect(study.models[0]!.modelDir).toBe(`${id}@main`);
  });
});

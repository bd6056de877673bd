/**
 * Models named by hub id, `hf:ORG/NAME[@REVISION]`: the files a run needs are fetched into the standard hub cache
 * (`HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`) in the layout
 * Python's `huggingface_hub` writes and reads: `models--ORG--NAME/blobs/<etag>`, `snapshots/<commit>/<path>`
 * (relative links into blobs/) and `refs/<revision>`. The revision and the file list come from the hub's API through
 * `@huggingface/hub`; the files themselves are fetched here, because a download must resume
 * (`blobs/<etag>.incomplete`, a Range request), be checked against its hash and show its progress.
 */
import { createHash, type Hash } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat, readdir, rename, stat, symlink, unlink } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, join, relative } from "node:path";

import { HsmError } from "../errors.js";
import { acquireLock } from "../store/lock.js";
import { openInput, openOutput, readTextIfPresent, makeDir, writeFileAtomic } from "../util/fs.js";
import { createProgress } from "../util/progress.js";

/** The hub the API calls go to when `HF_ENDPOINT` is not set. */
const DEFAULT_ENDPOINT = "https://huggingface.co";
/** Files at least this large show their progress. */
const PROGRESS_BYTES = 8 * 2 ** 20;
/** The files beside the graph that hsm reads, fetched where the repository has them. */
const SIDE_FILES = ["config.json", "genai_config.json", "tokenizer.json", "tokenizer_config.json"] as const;
const COMMIT = /^[0-9a-f]{40}$/;

/** A hub model that cannot be fetched or found in the cache: one line, naming the model or the file. */
class HubError extends HsmError {}

/** A parsed `hf:ORG/NAME[@REVISION]`. */
interface HubId {
  repo: string;
  revision: string;
}

/** A hub model ready on disk: its snapshot folder, the graph chosen in it, and the commit it was resolved to. */
export interface HubModel {
  dir: string;
  /** The graph's path inside the repository, e.g. `onnx/model.onnx`; undefined where the cache holds no default. */
  graph?: string;
  commit: string;
  /** `hf:ORG/NAME@COMMIT`: what outputs record as the model's source. */
  source: string;
}

/** The files a run needs, as the hub's tree lists them. */
interface RemoteFile {
  path: string;
  size: number;
  /** The blob's name in the cache: the sha256 of an LFS file, else its git blob sha1 (what the hub sends as ETag). */
  etag: string;
  hash: "sha256" | "git-sha1";
}

/** True where `text` names a hub model (`hf:` followed by a repository id). */
export function isHubId(text: string): boolean {
  return text.startsWith("hf:");
}

/**
 * Parses `hf:ORG/NAME[@REVISION]`; a malformed id is an error saying the form.
 * @example parseHubId("hf:onnx-community/Qwen2.5-0.5B-Instruct@main") // { repo: "onnx-community/Qwen2.5-0.5B-Instruct", revision: "main" }
 */
function parseHubId(text: string): HubId {
  const m = /^hf:([\w.-]+(?:\/[\w.-]+)?)(?:@([\w./-]+))?$/.exec(text);
  if (!m || m[1]!.split("/").some((part) => part.startsWith(".") || part.includes("--")) || m[2]?.includes(".."))
    throw new HubError(`${text}: not a hub model id; write hf:ORG/NAME or hf:ORG/NAME@REVISION`);
  return { repo: m[1]!, revision: m[2] ?? "main" };
}

/** `path` with a leading `~` read as the home folder, as huggingface_hub's expanduser reads its variables. */
const expandHome = (path: string) => (path === "~" || path.startsWith("~/") ? join(homedir(), path.slice(1)) : path);

/** huggingface_hub's home folder: `HF_HOME`, else `XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`. */
const hubHome = (env: NodeJS.ProcessEnv) =>
  expandHome(env.HF_HOME ?? join(env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "huggingface"));

/** The hub cache folder, as Python's huggingface_hub finds it (`HUGGINGFACE_HUB_CACHE` is its older name). */
function hubCacheDir(env: NodeJS.ProcessEnv): string {
  const given = env.HF_HUB_CACHE || env.HUGGINGFACE_HUB_CACHE;
  return given ? expandHome(given) : join(hubHome(env), "hub");
}

/**
 * The token sent to the hub, as Python's huggingface_hub finds it: `HF_TOKEN`, else the file `hf auth login`
 * writes (`HF_TOKEN_PATH`, else `HF_HOME/token`). The hub takes only `hf_…` tokens: another is refused here, in
 * one line naming where it came from.
 */
async function hubToken(env: NodeJS.ProcessEnv): Promise<string | undefined> {
  let token = env.HF_TOKEN?.trim();
  let where = "HF_TOKEN";
  if (!token) {
    where = env.HF_TOKEN_PATH ? expandHome(env.HF_TOKEN_PATH) : join(hubHome(env), "token");
    token = (await readTextIfPresent(where, { follow: true, maxBytes: 4096, what: "a hub token" }))?.trim();
  }
  if (!token) return undefined;
  if (!token.startsWith("hf_")) throw new HubError(`${where}: not a Hugging Face access token (one starts with "hf_")`);
  return token;
}

const truthy = (v: string | undefined) => ["1", "ON", "YES", "TRUE"].includes((v ?? "").toUpperCase());

/**
 * The model `id` (`hf:ORG/NAME[@REVISION]`) on disk: from the cache where its snapshot holds every file the run
 * needs, else downloaded. `modelFile` picks the graph (see {@link pickGraph}). With `HF_HUB_OFFLINE=1` nothing is
 * requested: the revision must be in the cache already.
 */
export async function fetchHubModel(id: string, options: { modelFile?: string } = {}): Promise<HubModel> {
  const env = process.env;
  const { repo, revision } = parseHubId(id);
  const storage = join(hubCacheDir(env), `models--${repo.replace("/", "--")}`);
  if (truthy(env.HF_HUB_OFFLINE)) return fromCache(id, repo, revision, storage, options.modelFile);
  const hubUrl = (env.HF_ENDPOINT ?? DEFAULT_ENDPOINT).replace(/\/+$/, "");
  const accessToken = await hubToken(env);
  const hub = await import("@huggingface/hub");
  const ask = async <T>(what: string, call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (err) {
      throw apiError(id, hubUrl, what, err, accessToken);
    }
  };
  const commit = COMMIT.test(revision)
    ? revision
    : (
        await ask("its revision", () =>
          hub.modelInfo({ name: repo, revision, hubUrl, accessToken, additionalFields: ["sha"] }),
        )
      ).sha;
  if (typeof commit !== "string" || !COMMIT.test(commit))
    throw new HubError(`${id}: the hub at ${hubUrl} named no commit for revision ${revision}`);
  if (commit !== revision) await writeRef(storage, revision, commit);
  const tree = await ask("its file list", async () => {
    const files: RemoteFile[] = [];
    for await (const e of hub.listFiles({ repo, revision: commit, recursive: true, hubUrl, accessToken })) {
      if (e.type !== "file") continue;
      const etag = e.lfs?.oid ?? e.oid;
      if (etag) files.push({ path: e.path, size: e.lfs?.size ?? e.size, etag, hash: e.lfs ? "sha256" : "git-sha1" });
    }
    return files;
  });
  const { graph, files } = neededFiles(id, tree, options.modelFile);
  const snapshot = join(storage, "snapshots", commit);
  for (const f of files) {
    const url = `${hubUrl}/${repo}/resolve/${commit}/${f.path.split("/").map(encodeURIComponent).join("/")}`;
    await fetchFile(storage, snapshot, f, url, accessToken);
  }
  return { dir: snapshot, graph: graph.path, commit, source: `hf:${repo}@${commit}` };
}

/**
 * The cached snapshot of `revision` (a commit, or a ref the cache records); anything missing is one line. The
 * graph is found as online (see {@link pickGraph}): `modelFile` as a path or a name under `onnx/`, else the
 * defaults, else the only graph the snapshot holds.
 */
async function fromCache(
  id: string,
  repo: string,
  revision: string,
  storage: string,
  modelFile: string | undefined,
): Promise<HubModel> {
  const offline = "HF_HUB_OFFLINE=1 forbids downloading it: run once without HF_HUB_OFFLINE to fill the cache";
  let commit = revision;
  if (!COMMIT.test(revision)) {
    const ref = join(storage, "refs", revision);
    const text = await readTextIfPresent(ref, { follow: true, maxBytes: 4096, what: "a hub ref" });
    if (text === null) throw new HubError(`${id}: not in the hub cache (${ref} is missing); ${offline}`);
    commit = text.trim();
  }
  const snapshot = join(storage, "snapshots", commit);
  if (!(await stat(snapshot).catch(() => undefined))?.isDirectory())
    throw new HubError(`${id}: not in the hub cache (${snapshot} is missing); ${offline}`);
  let graph = graphNames(modelFile).find((g) => existsSync(join(snapshot, g)));
  if (graph === undefined && modelFile === undefined) {
    // Online, a repository whose one graph has another name runs that graph: so does its snapshot offline.
    const graphs = (await readdir(snapshot, { recursive: true })).filter((p) => p.endsWith(".onnx")).sort();
    if (graphs.length > 1)
      throw new HubError(`${id}: the cache holds several graphs (${graphs.join(", ")}); pick one with --model-file`);
    graph = graphs[0];
  }
  return { dir: snapshot, graph: graph ?? modelFile, commit, source: `hf:${repo}@${commit}` };
}

/** What a 401 or 403 answer asks for: a token where none was sent, else one the hub accepts for this model. */
const tokenHint = (token: string | undefined) =>
  token === undefined
    ? "; a gated or private model needs HF_TOKEN"
    : "; the token sent was refused: it may have expired, or its account has no access to this gated or private model";

/** One line for a failed API call: the hub's status and what to do, or why it could not be reached. */
function apiError(id: string, hubUrl: string, what: string, err: unknown, token: string | undefined): HubError {
  const e = err as { statusCode?: number; message?: string; cause?: { code?: string; message?: string } };
  if (typeof e.statusCode === "number") {
    const hint =
      e.statusCode === 401 || e.statusCode === 403
        ? tokenHint(token)
        : e.statusCode === 404
          ? `; check the id and the revision${token === undefined ? " (a gated or private model needs HF_TOKEN)" : ""}`
          : "";
    return new HubError(
      `${id}: the hub at ${hubUrl} refused ${what} (HTTP ${e.statusCode}: ${(e.message ?? "").replace(/\. URL: .*$/s, "")})${hint}`,
    );
  }
  return new HubError(
    `${id}: cannot reach the hub at ${hubUrl} (${reason(err)}); with the model in the cache, HF_HUB_OFFLINE=1 runs without it`,
  );
}

/** The paths a graph is looked for at, in order: `modelFile` as a path or a name under `onnx/`, else the defaults. */
function graphNames(modelFile: string | undefined): string[] {
  return modelFile !== undefined ? [modelFile, `onnx/${modelFile}`] : ["model.onnx", "onnx/model.onnx"];
}

/**
 * The graph a run uses from the repository's `files`: `modelFile` where given (a path, or a name under `onnx/`),
 * else `model.onnx`, else `onnx/model.onnx` (the full-precision graph of transformers.js repositories), else the
 * only graph there is.
 */
function pickGraph(id: string, files: RemoteFile[], modelFile: string | undefined): RemoteFile {
  const graphs = files.filter((f) => f.path.endsWith(".onnx"));
  for (const name of graphNames(modelFile)) {
    const found = graphs.find((f) => f.path === name);
    if (found) return found;
  }
  if (modelFile === undefined && graphs.length === 1) return graphs[0]!;
  const list = graphs.map((f) => f.path).join(", ") || "no .onnx file";
  throw new HubError(
    modelFile !== undefined
      ? `${id}: has no graph ${modelFile}; it holds ${list}`
      : `${id}: holds several graphs (${list}); pick one with --model-file`,
  );
}

/** The graph, its external data files (`model.onnx_data`, `model.onnx_data_1`, …) and the files hsm reads beside it. */
function neededFiles(id: string, tree: RemoteFile[], modelFile: string | undefined) {
  const graph = pickGraph(id, tree, modelFile);
  const folder = graph.path.includes("/") ? graph.path.slice(0, graph.path.lastIndexOf("/") + 1) : "";
  const stem = graph.path.slice(folder.length, -".onnx".length).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const data = new RegExp(`^${stem}(\\.onnx)?(_data|\\.data)(_\\d+)?$`);
  const side = tree.filter((f) => (SIDE_FILES as readonly string[]).includes(f.path));
  const external = tree.filter((f) => f.path.startsWith(folder) && data.test(f.path.slice(folder.length)));
  // The graph comes last: a snapshot holding it has had everything else fetched before.
  return { graph, files: [...side, ...external, graph] };
}

async function writeRef(storage: string, revision: string, commit: string): Promise<void> {
  const ref = join(storage, "refs", revision);
  if ((await readTextIfPresent(ref, { follow: true, maxBytes: 4096 }).catch(() => null))?.trim() === commit) return;
  await makeDir(dirname(ref));
  await writeFileAtomic(ref, commit);
}

const exists = async (path: string) => (await lstat(path).catch(() => undefined)) !== undefined;

/** `f` at `snapshot/<path>`, a relative link to its blob, which is downloaded (or resumed) where it is missing. */
async function fetchFile(
  storage: string,
  snapshot: string,
  f: RemoteFile,
  url: string,
  token: string | undefined,
): Promise<void> {
  const pointer = join(snapshot, f.path);
  if (await stat(pointer).catch(() => undefined)) return;
  const blob = join(storage, "blobs", f.etag);
  if (!(await exists(blob))) {
    await makeDir(dirname(blob));
    // Runs sharing the cache (a study's shards, on this machine or others) take turns per blob, never two writing it.
    const lock = `${blob}.lock`;
    const release = await acquireLock(dirname(lock), basename(lock), {
      wait: (who) =>
        process.stderr.write(
          `${f.path}: waiting for another run to download it (${who}); if it is gone, delete ${lock}\n`,
        ),
    });
    try {
      if (!(await exists(blob))) await download(f, url, blob, token);
    } finally {
      await release();
    }
  }
  await makeDir(dirname(pointer));
  await linkPointer(pointer, relative(dirname(pointer), blob));
}

/**
 * Links `pointer` to `target`. Runs sharing the cache may make one link at once: a run finding a link there that
 * resolves (made by another since it looked) is done; one that resolves nowhere (its blob removed) is replaced.
 */
async function linkPointer(pointer: string, target: string): Promise<void> {
  for (;;) {
    try {
      return await symlink(target, pointer);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    if (await stat(pointer).catch(() => undefined)) return;
    await unlink(pointer).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "ENOENT") throw err;
    });
  }
}

/**
 * Downloads `f` into `blob`: the bytes go to `blob.incomplete`, which a later run continues with a Range request
 * after an interruption; the whole file's size and hash are checked before it is renamed into place. A file whose
 * hash differs is removed and refused.
 */
async function download(f: RemoteFile, url: string, blob: string, token: string | undefined): Promise<void> {
  const incomplete = `${blob}.incomplete`;
  let have = (await stat(incomplete).catch(() => undefined))?.size ?? 0;
  if (have > f.size) have = 0;
  const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
  if (have > 0 && have < f.size) headers.Range = `bytes=${have}-`;
  let res: Response | undefined;
  if (have < f.size) {
    try {
      res = await fetch(url, { headers, redirect: "follow" });
    } catch (err) {
      throw new HubError(`${url}: cannot be downloaded (${reason(err)}); run again to resume`);
    }
    if (res.status !== 200 && res.status !== 206) {
      // A gated model's API answers without a token; its files do not.
      const hint = res.status === 401 || res.status === 403 ? tokenHint(token) : "";
      throw new HubError(`${url}: the hub answered HTTP ${res.status} for ${f.path}${hint}`);
    }
    // A server that ignores the range sends the whole file: it is written again from its first byte.
    if (res.status === 200) have = 0;
  }
  const hash = createHash(f.hash === "sha256" ? "sha256" : "sha1");
  if (f.hash === "git-sha1") hash.update(`blob ${f.size}\0`);
  if (have > 0) await hashFile(incomplete, have, hash);
  const fh = await openOutput(incomplete, have > 0 ? "append" : "create");
  const progress = createProgress(`downloading ${f.path}`, Math.ceil(f.size / 2 ** 20), {
    quiet: f.size < PROGRESS_BYTES,
    unit: "MiB",
  });
  try {
    if (res?.body) {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        await fh.write(chunk);
        hash.update(chunk);
        have += chunk.length;
        progress.update(Math.floor(have / 2 ** 20));
      }
    }
    await fh.sync();
  } catch (err) {
    progress.end(null);
    throw new HubError(
      `${url}: the download of ${f.path} stopped after ${have} of ${f.size} bytes (${reason(err)}); run again to resume`,
    );
  } finally {
    await fh.close();
  }
  progress.end();
  const got = hash.digest("hex");
  if (have !== f.size || got !== f.etag) {
    await unlink(incomplete).catch(() => {});
    const what = f.hash === "sha256" ? "sha256" : "git blob sha1";
    throw new HubError(
      have !== f.size
        ? `${f.path}: the hub sent ${have} bytes but lists ${f.size}; removed, run again`
        : `${f.path}: the downloaded file's ${what} is ${got} but the hub lists ${f.etag}; removed, run again`,
    );
  }
  await rename(incomplete, blob);
}

const reason = (err: unknown) =>
  (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message ?? String(err);

/** Feeds the first `bytes` bytes of `path` to `hash`. */
async function hashFile(path: string, bytes: number, hash: Hash): Promise<void> {
  const { fh } = await openInput(path);
  try {
    for await (const chunk of fh.createReadStream({ start: 0, end: bytes - 1, autoClose: false })) hash.update(chunk);
  } finally {
    await fh.close();
  }
}

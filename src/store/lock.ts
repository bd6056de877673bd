/**
 * One writer per store: a lock file holding the writer's pid and host, never
 * seen without them, and never removed by anyone but its holder while it is held.
 *
 * - **Taking it.** The lock's content is written to a temporary file first,
 *   which is then hard-linked to the lock's name (`writeFileExclusive`): the
 *   link is atomic and fails where a lock exists, so a second process finds
 *   either no lock or a whole one. (Where the file system has no hard links
 *   the lock is created exclusively and then filled: a lock that names no
 *   process yet is taken to be held until it is TORN_GRACE_MS old.)
 * - **Taking over a stale one.** A lock left by a process that no longer runs
 *   (killed with `kill -9`, say) is taken over: it is removed and the lock taken
 *   as above. Several processes may judge one stale lock at once; each removes
 *   it only under a claim file named for exactly what it judged (the lock's
 *   inode, modification time and content), created exclusively, and only if
 *   the lock is still that one. So a process never removes a lock that another
 *   has just taken in its place, and of the processes racing for a stale lock
 *   exactly one takes it.
 *
 * On a shared file system (NFS included: the link is atomic there) a lock from
 * another host cannot be checked by pid, so its holder touches it every minute
 * and a lock from another host untouched for LOCK_STALE_MS is taken to be left
 * by a node that went away (a job killed, a node lost). A holder stopped by a
 * signal the CLI catches (Ctrl-C, SIGTERM) removes its lock first
 * (src/util/stop.ts).
 *
 * The hub cache's downloads take the same lock per blob (src/model/hub.ts), a
 * run waiting while another holds it rather than failing: runs sharing a cache
 * take turns.
 */
import { createHash } from "node:crypto";
import { unlinkSync } from "node:fs";
import { readdir, unlink, utimes } from "node:fs/promises";
import { hostname } from "node:os";
import { basename, dirname, join } from "node:path";

import { StoreError } from "../errors.js";
import { openInput, processRunning, readTextSync, writeFileExclusive } from "../util/fs.js";
import { onStopSignal } from "../util/stop.js";

const LOCK_NAME = ".hsm.lock";
/** How often a holder touches its lock. */
const HEARTBEAT_MS = 60_000;
/** A lock from another host untouched this long is stale. */
const LOCK_STALE_MS = 10 * 60_000;
/** A lock that names no process (being filled where there are no hard links, or torn by a crash) is held this long. */
const TORN_GRACE_MS = 30_000;
/** A claim (held for the few milliseconds of removing a stale lock) from another host is stale after this long. */
const CLAIM_STALE_MS = 60_000;
/** Claims on claims: each level needs a process killed while it held the level below. */
const CLAIM_DEPTH = 3;
/** Looks at the lock before giving up while other processes take over a stale one. */
const ATTEMPTS = 100;
const RETRY_MS = 20;
/** How often a process waiting for a held lock looks at it again. */
const WAIT_MS = 200;
/** A lock file is one line of JSON; anything longer is not one of ours. */
const LOCK_MAX_BYTES = 4096;

interface LockInfo {
  pid: number;
  host: string;
  started: string;
}

/** A lock file as read: who holds it, whether it still counts, and what exactly was read. */
interface SeenLock {
  /** Undefined where the file names no process (torn or still being filled). */
  info?: LockInfo;
  held: boolean;
  /** Names this very file with this very content: its inode, modification time and bytes, hashed. */
  id: string;
  ageMs: number;
}

function parseLock(text: string): LockInfo | undefined {
  try {
    const v = JSON.parse(text) as Partial<LockInfo>;
    return typeof v.pid === "number" && typeof v.host === "string" ? (v as LockInfo) : undefined;
  } catch {
    return undefined;
  }
}

/** The lock file at `path` as it is now; undefined where there is none. `staleMs` is for another host's. */
async function look(path: string, staleMs: number): Promise<SeenLock | undefined> {
  let opened;
  try {
    opened = await openInput(path, { maxBytes: LOCK_MAX_BYTES, what: "a lock file" });
  } catch (err) {
    if ((err as { problem?: string }).problem === "missing") return undefined;
    throw err;
  }
  const { fh } = opened;
  try {
    const st = await fh.stat();
    const bytes = await fh.readFile();
    const id = createHash("sha256")
      .update(`${st.dev}:${st.ino}:${st.mtimeMs}:${st.size}:`)
      .update(bytes)
      .digest("hex")
      .slice(0, 16);
    const ageMs = Date.now() - st.mtimeMs;
    const info = parseLock(bytes.toString("utf8"));
    const held = info ? (info.host === hostname() ? processRunning(info.pid) : ageMs < staleMs) : ageMs < TORN_GRACE_MS;
    return { info, held, id, ageMs };
  } finally {
    await fh.close();
  }
}

/**
 * Removes the lock at `path` if it is still exactly `seen`; true when it is gone or is no longer `seen`, false when
 * another process is removing it now. The removal happens only under the claim `<path>.break-<id>`: of the processes
 * that judged `seen` stale, the one that creates the claim removes it, and only after checking, claim in hand, that
 * the lock is still `seen` (it cannot change meanwhile: removing it takes this claim). A claim left by a process
 * killed while holding it is itself removed the same way.
 */
async function removeIfStill(path: string, seen: SeenLock, mine: string, depth: number): Promise<boolean> {
  const claim = `${path}.break-${seen.id}`;
  if (!(await writeFileExclusive(claim, mine))) {
    const other = await look(claim, CLAIM_STALE_MS);
    if (other && !other.held && depth < CLAIM_DEPTH) await removeIfStill(claim, other, mine, depth + 1);
    return false;
  }
  try {
    const now = await look(path, LOCK_STALE_MS);
    if (now?.id === seen.id) await unlink(path).catch(() => {});
    return true;
  } finally {
    await unlink(claim).catch(() => {});
  }
}

/** Removes claims left by processes killed while holding them: none can matter once the lock is taken anew. */
async function removeLeftClaims(path: string): Promise<void> {
  const prefix = `${basename(path)}.break-`;
  const names = await readdir(dirname(path)).catch(() => [] as string[]);
  const claims = names.filter(
    (n) => n.startsWith(prefix) && /^[0-9a-f]{16}(\.break-[0-9a-f]{16})*$/.test(n.slice(prefix.length)),
  );
  await Promise.all(claims.map((n) => unlink(join(dirname(path), n)).catch(() => {})));
}

/**
 * Takes the lock `name` in `dir` (a store's, by default); the returned function releases it (also done at process
 * exit). A lock held by another process is refused; with `wait`, it is waited for however long it is held, `wait`
 * told once who holds it.
 */
export async function acquireLock(
  dir: string,
  name = LOCK_NAME,
  options: { wait?: (holder: string) => void } = {},
): Promise<() => Promise<void>> {
  const path = join(dir, name);
  const mine: LockInfo = { pid: process.pid, host: hostname(), started: new Date().toISOString() };
  const text = JSON.stringify(mine) + "\n";
  let told = false;
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    if (await writeFileExclusive(path, text)) {
      await removeLeftClaims(path);
      return holding(path, text);
    }
    const other = await look(path, LOCK_STALE_MS);
    if (!other) continue; // released meanwhile
    if (other.held) {
      const who = other.info
        ? `pid ${other.info.pid} on ${other.info.host}, since ${other.info.started}`
        : `its lock, ${Math.round(other.ageMs / 1000)} s old, names no process yet`;
      if (!options.wait)
        throw new StoreError(
          dir,
          `is being written by another hsm process (${who}); wait for it to finish, or stop it. If it is gone, delete ${path}`,
        );
      if (!told) options.wait(who);
      told = true;
      attempt--; // a lock held is no race lost: its holder's turn lasts as long as it holds it
      await new Promise((r) => setTimeout(r, WAIT_MS));
      continue;
    }
    if (!(await removeIfStill(path, other, text, 0))) await new Promise((r) => setTimeout(r, RETRY_MS));
  }
  throw new StoreError(dir, `could not take the lock ${path}: other processes kept taking it over`);
}

/** The lock at `path` is ours (`text`): touch it while held, and remove it when released, at exit or on a stop signal. */
function holding(path: string, text: string): () => Promise<void> {
  const heartbeat = setInterval(() => {
    const now = new Date();
    utimes(path, now, now).catch(() => {});
  }, HEARTBEAT_MS);
  heartbeat.unref();
  // Only while it is still ours: a lock taken over (its holder judged gone) belongs to its new holder.
  const removeIfOurs = () => {
    try {
      if (readTextSync(path) === text) unlinkSync(path);
    } catch {
      /* already gone */
    }
  };
  const onExit = () => {
    clearInterval(heartbeat);
    removeIfOurs();
  };
  process.once("exit", onExit);
  const forget = onStopSignal(onExit);
  return async () => {
    process.removeListener("exit", onExit);
    forget();
    clearInterval(heartbeat);
    removeIfOurs();
  };
}

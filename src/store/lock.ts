/**
 * One writer per store: a lock file created exclusively, holding the writer's
 * pid and host. A lock left by a process that no longer runs (killed with
 * `kill -9`, say) is taken over; a live one is refused.
 *
 * On a shared file system (NFS included: exclusive create is atomic there) a
 * lock from another host cannot be checked by pid, so its holder touches it
 * every minute and a lock from another host untouched for LOCK_STALE_MS is
 * taken to be left by a node that went away (a job killed, a node lost).
 * A holder stopped by a signal the CLI catches (Ctrl-C, SIGTERM) removes its
 * lock first (src/util/stop.ts).
 */
import { unlinkSync } from "node:fs";
import { open, stat, unlink, utimes } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";

import { StoreError } from "../errors.js";
import { fileError, readText, readTextSync } from "../util/fs.js";
import { onStopSignal } from "../util/stop.js";

const LOCK_NAME = ".hsm.lock";
/** How often a holder touches its lock. */
const HEARTBEAT_MS = 60_000;
/** A lock from another host untouched this long is stale. */
const LOCK_STALE_MS = 10 * 60_000;

interface LockInfo {
  pid: number;
  host: string;
  started: string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Takes the lock `name` in `dir` (a store's, by default); the returned function releases it (also done at process exit). */
export async function acquireLock(dir: string, name = LOCK_NAME): Promise<() => Promise<void>> {
  const path = join(dir, name);
  const mine: LockInfo = { pid: process.pid, host: hostname(), started: new Date().toISOString() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fh = await open(path, "wx");
      await fh.writeFile(JSON.stringify(mine) + "\n");
      await fh.close();
      const heartbeat = setInterval(() => {
        const now = new Date();
        utimes(path, now, now).catch(() => {});
      }, HEARTBEAT_MS);
      heartbeat.unref();
      const onExit = () => {
        clearInterval(heartbeat);
        try {
          if ((JSON.parse(readTextSync(path)) as LockInfo).pid === process.pid) unlinkSync(path);
        } catch {
          /* already gone */
        }
      };
      process.once("exit", onExit);
      const forget = onStopSignal(onExit);
      return async () => {
        process.removeListener("exit", onExit);
        forget();
        clearInterval(heartbeat);
        await unlink(path).catch(() => {});
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw fileError(err, path, "write");
      let other: LockInfo | undefined;
      try {
        other = JSON.parse(await readText(path)) as LockInfo;
      } catch {
        other = undefined; // torn or empty: its writer died while writing it
      }
      const touched = (await stat(path).catch(() => undefined))?.mtimeMs ?? 0;
      const held = other && (other.host === mine.host ? alive(other.pid) : Date.now() - touched < LOCK_STALE_MS);
      if (held) {
        throw new StoreError(
          dir,
          `is being written by another hsm process (pid ${other!.pid} on ${other!.host}, since ${other!.started}); ` +
            `wait for it to finish, or stop it. If it is gone, delete ${path}`,
        );
      }
      await unlink(path).catch(() => {});
    }
  }
  throw new StoreError(dir, `could not take the lock ${path}`);
}

/**
 * A lock for work that may find its output on read-only media: there the lock cannot be made, and no writer can
 * be either, so the caller may read what is there and do whatever needs no write (a finished store, a finished
 * generations file: every step skipped). Kept apart from lock.ts, whose locking it uses as it is.
 */
import { FileError } from "../errors.js";
import { acquireLock } from "./lock.js";

/** {@link acquireLock}'s, or nothing to release and the error that says the folder is read-only (EROFS). */
export async function lockUnlessReadOnly(
  dir: string,
  name?: string,
): Promise<{ release: () => Promise<void>; readOnly?: FileError }> {
  try {
    return { release: await acquireLock(dir, name) };
  } catch (err) {
    if (!(err instanceof FileError && err.code === "EROFS")) throw err;
    return { release: async () => {}, readOnly: err };
  }
}

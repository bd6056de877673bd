/**
 * File system helpers shared by every reader and writer of user files: one way
 * to turn an operating-system error into an error that names the path and says
 * why, one atomic, durable write, and one read of a large file that goes on
 * while this thread works.
 */
import { closeSync, fstatSync, openSync, read } from "node:fs";
import { open, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

import { FileError, HsmError } from "../errors.js";

/** The operating system's reasons, in words, for the codes users meet. */
const REASONS: Readonly<Record<string, string>> = {
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EISDIR: "it is a directory",
  ENOTDIR: "a component of the path is not a directory",
  EIO: "input/output error",
  ELOOP: "too many levels of symbolic links",
  EMFILE: "too many open files",
  ENFILE: "too many open files in the system",
  ENOSPC: "no space left on device",
  EDQUOT: "disk quota exceeded",
  EROFS: "read-only file system",
  EFBIG: "file too large",
  ENAMETOOLONG: "file name too long",
  EEXIST: "it already exists",
  ENOTEMPTY: "it is a directory that is not empty",
  EBUSY: "resource busy",
};

/** The operating system's reason for `err`, e.g. "permission denied (EACCES)". */
export function osReason(err: { code?: string; message?: string }): string {
  const code = err.code;
  // Node's own text is "EACCES: permission denied, open '/x'"; keep only the reason.
  const fromMessage = err.message?.replace(/^E[A-Z]+: /, "").replace(/, \w+ '.*$/s, "");
  const reason = (code && REASONS[code]) ?? fromMessage ?? "unknown error";
  return code ? `${reason} (${code})` : reason;
}

/**
 * The error to throw for a failed file operation on `path`: a missing file is
 * reported as missing, anything else as unreadable (or unwritable) with the
 * operating system's reason. Errors that are already hsm's pass through, and so
 * do errors without an errno code (bugs, not file problems).
 * @example throw fileError(err, "bank.jsonl") // bank.jsonl: cannot be read: permission denied (EACCES)
 */
export function fileError(err: unknown, path: string, action: "read" | "write" = "read"): Error {
  if (err instanceof HsmError) return err;
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.code !== "string") return err instanceof Error ? err : new Error(String(err));
  if (action === "read" && e.code === "ENOENT")
    return new FileError(path, "missing", e.code, "does not exist", { cause: err });
  if (action === "write" && e.code === "ENOENT") {
    return new FileError(path, "unwritable", e.code, "cannot be written: its folder does not exist (ENOENT)", {
      cause: err,
    });
  }
  return action === "read"
    ? new FileError(path, "unreadable", e.code, `cannot be read: ${osReason(e)}`, { cause: err })
    : new FileError(path, "unwritable", e.code, `cannot be written: ${osReason(e)}`, { cause: err });
}

/** One read request per GiB: few requests for a multi-GiB model, and under the 2 GiB a single read(2) may return. */
const READ_CHUNK_BYTES = 1 << 30;

/**
 * The whole of a large file (a model), read by one request to libuv's thread
 * pool per GiB: `readFile` asks for 512 KiB at a time and needs this
 * thread's event loop between requests, so it stalls whenever this thread is
 * busy (loading a tokenizer, say). Errors are Node's, as `readFile`'s are.
 */
export async function readWhole(path: string): Promise<Buffer> {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const buf = Buffer.allocUnsafe(size);
    for (let done = 0; done < size;) {
      const got = await new Promise<number>((resolve, reject) =>
        read(fd, buf, done, Math.min(size - done, READ_CHUNK_BYTES), done, (err, n) =>
          err ? reject(err) : resolve(n),
        ),
      );
      if (got === 0) return buf.subarray(0, done); // the file shrank meanwhile
      done += got;
    }
    return buf;
  } finally {
    closeSync(fd);
  }
}

/** fsyncs a directory so that a rename or a new file in it survives a crash. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

let tempCounter = 0;

/** What {@link writeFileAtomic} writes: text (UTF-8), bytes, or pieces written one after another. */
export type AtomicData = string | Uint8Array | Iterable<string | Uint8Array> | AsyncIterable<string | Uint8Array>;

/**
 * Replaces `path` so that a reader sees the old content or the new, never a
 * torn file, and the new content survives a crash once this returns: the data
 * goes to a temporary file in the same folder, which is fsynced, renamed over
 * `path`, and the folder fsynced. On any failure the temporary file is removed
 * and `path` keeps its old content; the error names `path`.
 */
export async function writeFileAtomic(path: string, data: AtomicData): Promise<void> {
  const dir = dirname(path);
  const temp = join(dir, `.${basename(path)}.${process.pid}.${tempCounter++}.tmp`);
  let fh;
  try {
    fh = await open(temp, "wx");
  } catch (err) {
    throw fileError(err, path, "write");
  }
  try {
    if (typeof data === "string" || data instanceof Uint8Array) await fh.writeFile(data);
    // Each writeFile continues where the previous one stopped.
    else for await (const piece of data) await fh.writeFile(piece);
    await fh.sync();
    await fh.close();
    fh = undefined;
    await rename(temp, path);
  } catch (err) {
    await fh?.close().catch(() => {});
    await unlink(temp).catch(() => {});
    throw fileError(err, path, "write");
  }
  try {
    await syncDir(dir);
  } catch (err) {
    throw fileError(err, dir, "write");
  }
}

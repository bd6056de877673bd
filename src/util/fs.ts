/**
 * The one rule for every file hsm reads or writes, shared by every reader and
 * writer:
 *
 * - **Inputs** are opened without blocking and must be regular files: a FIFO,
 *   a device or a folder is refused by name before a byte is read, so nothing
 *   hangs on a pipe or grows without end on `/dev/zero`. Files inside a store
 *   or an outputs folder are opened without following a link at their last
 *   component ({@link InputOptions.follow} false); files the user names, and
 *   the files of a model folder (whose hub cache links every file into
 *   `blobs/`), are resolved once, deliberately. Where a size is implied the
 *   read is capped. Text is strict UTF-8: an invalid byte is named with its
 *   offset, a byte-order mark by name.
 * - **Outputs** are written atomically ({@link writeFileAtomic},
 *   {@link writeFilesAtomic}): into a temporary file of the same folder, then
 *   renamed over the target, which replaces a link rather than writing
 *   through it. A failure names the file and leaves the old content and no
 *   temporary file. A file that must not replace anything
 *   ({@link writeFileExclusive}) is linked into place instead, which fails
 *   where the target exists. Files written in place (a store's layer files,
 *   an answers file appended to) are opened with {@link openOutput}, never
 *   through a link.
 * - Every operating-system error becomes an error that names the path and says
 *   why ({@link fileError}).
 */
import { randomInt } from "node:crypto";
import { closeSync, constants, fstatSync, openSync, read, readlinkSync, readSync, rmSync, type Stats } from "node:fs";
import { copyFile, link, mkdir, open, readdir, rename, rm, stat, unlink, type FileHandle } from "node:fs/promises";
import { hostname } from "node:os";
import { isUtf8 } from "node:buffer";
import { basename, dirname, join } from "node:path";

import { FileError, HsmError, UsageError } from "../errors.js";
import { onStopSignal } from "./stop.js";

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

/** How an input is opened. */
export interface InputOptions {
  /**
   * Resolve a symbolic link at the path's last component: true for files the
   * user names and for a model folder's files; false (the default) inside a
   * store or an outputs folder, where a link is refused.
   */
  follow?: boolean;
  /** The most bytes the file may hold; a larger file is refused before it is read. */
  maxBytes?: number;
  /** What the file is, for the size error ("a manifest", "a config.json"). */
  what?: string;
}

/** The cap on a JSON or YAML file read whole: far above any real one, and under V8's longest string. */
export const TEXT_FILE_MAX_BYTES = 256 * 1024 * 1024;

/** What a file that is not a regular file is, in words. */
function kindOf(st: Stats): string {
  if (st.isFIFO()) return "a FIFO (named pipe)";
  if (st.isCharacterDevice()) return "a character device";
  if (st.isBlockDevice()) return "a block device";
  if (st.isSocket()) return "a socket";
  return "not a regular file";
}

/** The error for a path that is not a regular file: "cannot be read: it is a FIFO (named pipe), not a regular file". */
function notRegular(st: Stats, path: string, action: "read" | "write"): FileError {
  const problem = action === "read" ? "unreadable" : "unwritable";
  const verb = action === "read" ? "cannot be read" : "cannot be written";
  if (st.isDirectory()) return new FileError(path, problem, "EISDIR", `${verb}: it is a directory (EISDIR)`);
  return new FileError(path, problem, undefined, `${verb}: it is ${kindOf(st)}, not a regular file`);
}

/** Flags of an input's open: read-only, never blocking on a FIFO, and not through a link unless asked. */
function inputFlags(o: InputOptions): number {
  return constants.O_RDONLY | constants.O_NONBLOCK | (o.follow ? 0 : constants.O_NOFOLLOW);
}

/**
 * The error for an input's failed open: a link refused by O_NOFOLLOW is named as a link, and a link followed to
 * nothing (a hub cache's pruned blob) by where it points.
 */
function openError(err: unknown, path: string, o: InputOptions): Error {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (!o.follow && code === "ELOOP")
    return new FileError(path, "unreadable", "ELOOP", "is a symbolic link, which hsm does not follow here");
  if (o.follow && code === "ENOENT") {
    let target: string | undefined;
    try {
      target = readlinkSync(path);
    } catch {
      target = undefined; // not a link: the file itself is missing
    }
    if (target !== undefined) {
      const problem = `is a symbolic link to ${target}, which does not exist (ENOENT)`;
      return new FileError(path, "missing", code, problem, { cause: err });
    }
  }
  return fileError(err, path);
}

/** Refuses what is not a regular file, or holds more than `o.maxBytes`. */
function checkInput(st: Stats, path: string, o: InputOptions): void {
  if (!st.isFile()) throw notRegular(st, path, "read");
  if (o.maxBytes !== undefined && st.size > o.maxBytes) {
    throw new FileError(
      path,
      "unreadable",
      "EFBIG",
      `holds ${st.size} bytes, more than the ${o.maxBytes} ${o.what ?? "such a file"} may hold`,
    );
  }
}

/**
 * Opens an input by the rule above: a handle on a regular file, checked
 * before anything is read. The caller closes it.
 */
export async function openInput(path: string, o: InputOptions = {}): Promise<{ fh: FileHandle; size: number }> {
  let fh: FileHandle;
  try {
    fh = await open(path, inputFlags(o));
  } catch (err) {
    throw openError(err, path, o);
  }
  try {
    const st = await fh.stat();
    checkInput(st, path, o);
    return { fh, size: st.size };
  } catch (err) {
    await fh.close();
    throw fileError(err, path);
  }
}

/** The whole of an input, opened by the rule above. */
export async function readInput(path: string, o: InputOptions = {}): Promise<Buffer> {
  const { fh, size } = await openInput(path, o);
  try {
    const buf = Buffer.allocUnsafe(size);
    let done = 0;
    while (done < size) {
      const { bytesRead } = await fh.read(buf, done, size - done, done);
      if (bytesRead === 0) break; // the file shrank meanwhile
      done += bytesRead;
    }
    return buf.subarray(0, done);
  } catch (err) {
    throw fileError(err, path);
  } finally {
    await fh.close();
  }
}

/**
 * {@link readInput} for the few readers that must stay synchronous; with `range`, only its `length` bytes from
 * `offset`, all of them (a file that ends before fails naming the range).
 */
export function readInputSync(path: string, o: InputOptions = {}, range?: { offset: number; length: number }): Buffer {
  let fd: number;
  try {
    fd = openSync(path, inputFlags(o));
  } catch (err) {
    throw openError(err, path, o);
  }
  try {
    const st = fstatSync(fd);
    checkInput(st, path, o);
    const start = range?.offset ?? 0;
    const length = range?.length ?? st.size;
    const buf = Buffer.allocUnsafe(length);
    let done = 0;
    while (done < length) {
      const got = readSync(fd, buf, done, length - done, start + done);
      if (got === 0) break;
      done += got;
    }
    if (range && done < length)
      throw new FileError(path, "unreadable", undefined, `ends before the ${length} bytes at offset ${start}`);
    return buf.subarray(0, done);
  } catch (err) {
    throw fileError(err, path);
  } finally {
    closeSync(fd);
  }
}

const UTF8_BOM = [0xef, 0xbb, 0xbf] as const;

/** Whether `bytes` begins with a UTF-8 byte-order mark. */
export function hasUtf8Bom(bytes: Uint8Array): boolean {
  return bytes.length >= 3 && UTF8_BOM.every((b, i) => bytes[i] === b);
}

/**
 * The offset of the first byte of `bytes` that is not well-formed UTF-8
 * (overlong forms, surrogates and code points past U+10FFFF included), or -1.
 */
export function invalidUtf8Offset(bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    // The length of the sequence and the range its second byte must fall in (RFC 3629's table).
    let n: number,
      lo = 0x80,
      hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) n = 2;
    else if (b >= 0xe0 && b <= 0xef) {
      n = 3;
      if (b === 0xe0) lo = 0xa0;
      if (b === 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      n = 4;
      if (b === 0xf0) lo = 0x90;
      if (b === 0xf4) hi = 0x8f;
    } else return i;
    for (let k = 1; k < n; k++) {
      const c = bytes[i + k];
      if (c === undefined) return i;
      if (k === 1 ? c < lo || c > hi : c < 0x80 || c > 0xbf) return i;
    }
    i += n;
  }
  return -1;
}

/**
 * `bytes` as text, strictly: a byte-order mark or a byte that is not UTF-8 is
 * an error naming `path` and the byte's offset (plus `base`, where `bytes` is
 * a piece of a longer file).
 */
export function utf8Text(bytes: Uint8Array, path: string, base = 0): string {
  checkUtf8(bytes, path, base);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
}

/** Throws the {@link FileError} {@link utf8Text} throws where `bytes` are not UTF-8 text without a byte-order mark. */
function checkUtf8(bytes: Uint8Array, path: string, base = 0): void {
  if (base === 0 && hasUtf8Bom(bytes)) {
    throw new FileError(
      path,
      "unreadable",
      undefined,
      "starts with a UTF-8 byte-order mark (EF BB BF); save it as UTF-8 without one",
    );
  }
  if (!isUtf8(bytes)) {
    const at = base + invalidUtf8Offset(bytes);
    throw new FileError(
      path,
      "unreadable",
      undefined,
      `is not valid UTF-8: byte 0x${bytes[at - base]!.toString(16).padStart(2, "0")} at offset ${at}`,
    );
  }
}

/** A text input, read whole by the rule above (capped at {@link TEXT_FILE_MAX_BYTES} unless told otherwise). */
export async function readText(path: string, o: InputOptions = {}): Promise<string> {
  return utf8Text(await readInput(path, { maxBytes: TEXT_FILE_MAX_BYTES, ...o }), path);
}

/** {@link readText} for synchronous readers. */
export function readTextSync(path: string, o: InputOptions = {}): string {
  return readUtf8Sync(path, o).toString("utf8");
}

/** {@link readTextSync}'s bytes, checked as it checks them but not decoded, for a reader that decodes only part. */
export function readUtf8Sync(path: string, o: InputOptions = {}): Buffer {
  const bytes = readInputSync(path, { maxBytes: TEXT_FILE_MAX_BYTES, ...o });
  checkUtf8(bytes, path);
  return bytes;
}

/** One read request per GiB: few requests for a multi-GiB model, and under the 2 GiB a single read(2) may return. */
const READ_CHUNK_BYTES = 1 << 30;

/**
 * A regular file opened for reading spans of it, each into a buffer the file's
 * size at the span's own offset, by one request to libuv's thread pool per GiB:
 * `readFile` asks for 512 KiB at a time and needs this thread's event loop
 * between requests, so it stalls whenever this thread is busy (loading a
 * tokenizer, say). What is never read costs no memory. Errors name the path
 * ({@link fileError}), as every input's do. The caller closes it.
 */
export interface FileSpans {
  /** The file's size in bytes, when it was opened; every span read lands at its offset. */
  readonly bytes: Buffer;
  /** Reads [from, to); the offset where the file ended instead, if it is shorter now. */
  read(from: number, to: number): Promise<number>;
  close(): void;
}

/** The error for a file whose size changed between two reads of it. */
export function changedWhileRead(path: string): FileError {
  return new FileError(path, "unreadable", undefined, "cannot be read: it changed while it was read");
}

/** Opens `path` (a link at it followed) for {@link FileSpans}, into `into` where given (the file's size, or refused). */
export function openSpans(path: string, into?: Buffer): FileSpans {
  let fd: number;
  try {
    fd = openSync(path, inputFlags({ follow: true }));
  } catch (err) {
    throw openError(err, path, { follow: true });
  }
  let bytes: Buffer;
  try {
    const st = fstatSync(fd);
    checkInput(st, path, {});
    if (into && into.length !== st.size) throw changedWhileRead(path);
    bytes = into ?? Buffer.allocUnsafe(st.size);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return {
    bytes,
    read: async (from, to) => {
      for (let at = from; at < to;) {
        const got = await new Promise<number>((resolve, reject) =>
          read(fd, bytes, at, Math.min(to - at, READ_CHUNK_BYTES), at, (err, n) =>
            err ? reject(fileError(err, path)) : resolve(n),
          ),
        );
        if (got === 0) return at;
        at += got;
      }
      return to;
    },
    close: () => closeSync(fd),
  };
}

/** Every byte of an open file, into its buffer (shorter where the file shrank meanwhile). */
export async function readAll(file: FileSpans): Promise<Buffer> {
  const end = await file.read(0, file.bytes.length);
  return end < file.bytes.length ? file.bytes.subarray(0, end) : file.bytes;
}

/** The whole of a large file (a model), read as {@link openSpans} reads. */
export async function readWhole(path: string): Promise<Buffer> {
  const file = openSpans(path);
  try {
    return await readAll(file);
  } finally {
    file.close();
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

/**
 * Numbers this process's temporary files, from a random start: processes on other hosts (containers, each with a PID
 * namespace of its own, often run hsm as pid 1) may share the pid and write in the same folder at once.
 */
let tempCounter = randomInt(2 ** 47);

/** The characters of `text` as a regular expression matches them literally. */
const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** A new temporary file beside `path` for writing it whole: `.<name>.<pid>.<n>.tmp`. */
function tempPath(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${tempCounter++}.tmp`);
}

/** Whether `name` is a temporary file of an atomic write of a file named `base` ({@link tempPath}), by any process. */
export function isTempOf(name: string, base: string): boolean {
  return new RegExp(`^\\.${literal(base)}\\.\\d+\\.\\d+\\.tmp$`).test(name);
}

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
  await writeFilesAtomic([[path, data]]);
}

/** Writes `data` into the new file `temp` (for `path`) and fsyncs it; on failure removes it, naming `path`. */
async function writeTemp(temp: string, path: string, data: AtomicData): Promise<void> {
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
  } catch (err) {
    await fh.close().catch(() => {});
    await unlink(temp).catch(() => {});
    throw fileError(err, path, "write");
  }
}

/** What a file system without hard links (FAT, exFAT, some network and FUSE ones) answers a link with. */
const NO_HARD_LINKS = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS"]);

/**
 * Writes `path` only where nothing is there yet, whole or not at all: the data
 * goes to a temporary file in the same folder, which is fsynced and then
 * linked to `path`. The link fails rather than replace what another writer,
 * another process too, put there first. Where the file system has no hard
 * links, the temporary file is copied to `path` instead, created exclusively
 * (still never replacing anything, but a crash midway can leave it part
 * written), and fsynced. Returns false (and leaves nothing behind) when `path`
 * exists; every other failure is an error naming `path`. `linkFile` is for
 * tests.
 */
export async function writeFileExclusive(
  path: string,
  data: AtomicData,
  linkFile: (from: string, to: string) => Promise<void> = link,
): Promise<boolean> {
  const temp = tempPath(path);
  const forget = onStopSignal(() => rmSync(temp, { force: true }));
  try {
    await writeTemp(temp, path, data);
    try {
      await linkFile(temp, path).catch(async (err: unknown) => {
        if (!NO_HARD_LINKS.has((err as NodeJS.ErrnoException).code ?? "")) throw err;
        await copyFile(temp, path, constants.COPYFILE_EXCL);
        const fh = await open(path, "r+");
        await fh.sync().finally(() => fh.close());
      });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw fileError(err, path, "write");
    } finally {
      await unlink(temp).catch(() => {});
    }
    try {
      await syncDir(dirname(path));
    } catch (err) {
      throw fileError(err, dirname(path), "write");
    }
    return true;
  } finally {
    forget();
  }
}

/** How a file written in place is opened: created new, opened to change, or appended to. */
export type OutputMode = "create" | "update" | "append";

const OUTPUT_FLAGS: Record<OutputMode, number> = {
  create: constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC,
  update: constants.O_RDWR,
  append: constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT,
};

/**
 * Opens a file written in place (a store's layer file, an answers file
 * appended to) without following a link at its last component and only if it
 * is a regular file, so a write never lands in a file outside the folder it
 * belongs to. Errors name `path`.
 */
export async function openOutput(path: string, mode: OutputMode): Promise<FileHandle> {
  let fh: FileHandle;
  try {
    fh = await open(path, OUTPUT_FLAGS[mode] | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o644);
  } catch (err) {
    if ((err as NodeJS.ErrnoException)?.code === "ELOOP")
      throw new FileError(path, "unwritable", "ELOOP", "is a symbolic link, which hsm does not write through");
    throw fileError(err, path, "write");
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw notRegular(st, path, "write");
    return fh;
  } catch (err) {
    await fh.close();
    throw fileError(err, path, "write");
  }
}

/**
 * Writes several files as one step: every file goes to its temporary file
 * first (written and fsynced), and only when all are written are they renamed
 * over their targets. A failure while writing (a full disk) removes every
 * temporary file and leaves every target as it was, so a reader never meets
 * new files beside old ones from that failure. Errors name the file.
 */
export async function writeFilesAtomic(files: ReadonlyArray<readonly [path: string, data: AtomicData]>): Promise<void> {
  const temps: string[] = [];
  // A signal that stops the process meanwhile removes them too (src/util/stop.ts).
  const forget = onStopSignal(() => temps.forEach((t) => rmSync(t, { force: true })));
  try {
    await writeAndRename(files, temps);
  } finally {
    forget();
  }
}

/** writeFilesAtomic's steps; `temps` collects the temporary files as they are made. */
async function writeAndRename(files: ReadonlyArray<readonly [path: string, data: AtomicData]>, temps: string[]) {
  try {
    for (const [path, data] of files) {
      const temp = tempPath(path);
      temps.push(temp);
      await writeTemp(temp, path, data);
    }
  } catch (err) {
    await Promise.all(temps.map((t) => unlink(t).catch(() => {})));
    throw err;
  }
  for (const [i, [path]] of files.entries()) {
    try {
      await rename(temps[i]!, path);
    } catch (err) {
      await Promise.all(temps.slice(i).map((t) => unlink(t).catch(() => {})));
      throw fileError(err, path, "write");
    }
  }
  for (const dir of new Set(files.map(([path]) => dirname(path)))) {
    try {
      await syncDir(dir);
    } catch (err) {
      throw fileError(err, dir, "write");
    }
  }
}

/** {@link readText}, or null where the file does not exist; every other problem is still an error. */
export async function readTextIfPresent(path: string, o: InputOptions = {}): Promise<string | null> {
  try {
    return await readText(path, o);
  } catch (err) {
    if (err instanceof FileError && err.problem === "missing") return null;
    throw err;
  }
}

/** A file or folder a command reads or writes, with the option (or argument) that names it: `--bank`, `<out>`. */
export interface NamedPath {
  name: string;
  path: string;
}

/**
 * Whether `path` is the file or folder `a` (as stat found it, once for every path it is compared with): the same
 * device and inode, so a symbolic link to it and a hard link of it count. A path that does not exist is not it.
 */
export async function isSameFile(a: Stats, path: string): Promise<boolean> {
  const b = await stat(path).catch(() => undefined);
  return b !== undefined && a.dev === b.dev && a.ino === b.ino;
}

/**
 * Refuses (a usage error, exit 2) an output that is one of the command's inputs, compared by {@link isSameFile}:
 * writing it would replace what the command reads. An output that does not exist yet is none of them.
 * @example await refuseInputAsOutput({ name: "--out", path: "a.jsonl" }, [{ name: "--bank", path: "a.jsonl" }])
 * // --out a.jsonl: is also --bank (a.jsonl), which this command reads; choose another file for --out
 */
export async function refuseInputAsOutput(output: NamedPath, inputs: readonly NamedPath[]): Promise<void> {
  const st = await stat(output.path).catch(() => undefined);
  if (st === undefined) return;
  const kind = st.isDirectory() ? "folder" : "file";
  for (const input of inputs) {
    if (!(await isSameFile(st, input.path))) continue;
    throw new UsageError(
      `${output.name} ${output.path}: is also ${input.name} (${input.path}), which this command reads; ` +
        `choose another ${kind} for ${output.name}`,
    );
  }
}

/**
 * Refuses (a usage error, exit 2) to write `what` into `dir` where `dir` already holds anything: a file, or a
 * folder that is not empty. Commands that make a whole folder never replace what a user keeps there.
 */
export async function refuseFilled(dir: string, what: string): Promise<void> {
  let entries: string[] | undefined;
  try {
    entries = await readdir(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return;
    if (code !== "ENOTDIR") throw fileError(err, dir);
  }
  if (entries?.length === 0) return;
  throw new UsageError(
    `${dir} already exists${entries ? " and is not empty" : " as a file"}; choose a new folder for ${what}`,
  );
}

/**
 * Makes the folder `dir` and any missing parents, as `mkdir -p` does, but with one bounded walk up the path and
 * an error naming the path for every way it can fail: a file where a folder should be, a file system that
 * refuses new folders (`/proc`, `/sys`), no permission, no space.
 */
export async function makeDir(dir: string): Promise<void> {
  try {
    await mkdir(dir);
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") return expectFolder(dir, err);
    if (code !== "ENOENT" || dirname(dir) === dir) throw fileError(err, dir, "write");
  }
  await makeDir(dirname(dir));
  try {
    await mkdir(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") return expectFolder(dir, err);
    if (code === "ENOENT") {
      throw new FileError(
        dir,
        "unwritable",
        code,
        `cannot be made: ${dirname(dir)} does not take new folders (ENOENT)`,
      );
    }
    throw fileError(err, dir, "write");
  }
}

/** Succeeds where `dir` is a folder (or a link to one); a file there is an error naming it. */
async function expectFolder(dir: string, cause: unknown): Promise<void> {
  const st = await stat(dir).catch(() => undefined);
  if (st?.isDirectory()) return;
  throw new FileError(dir, "unwritable", "EEXIST", "is a file, not a folder; name a folder here", { cause });
}

/** Whether the process `pid` runs on this host (one of another user's counts). */
export function processRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Makes a new hidden folder beside `path`, `.<name>.<what>-<host>-<pid>`, in which a command builds `path` whole
 * before renaming it into place (its parent made first, as {@link makeDir} makes it). A signal that stops the
 * process removes it (src/util/stop.ts); the caller removes it on failure and calls `forget` once it is renamed or
 * removed. Leftovers of earlier runs for the same `path` whose process no longer runs on this host (killed with
 * `kill -9`, a crash) are removed first: each can be as large as the whole output. A leftover of
 * another host is left alone, since its process cannot be checked from here.
 */
export async function makeWorkFolder(path: string, what: string): Promise<{ dir: string; forget: () => void }> {
  const parent = dirname(path);
  const prefix = `.${basename(path)}.${what}-`;
  const host = hostname();
  const dir = join(parent, `${prefix}${host}-${process.pid}`);
  await makeDir(parent);
  // `-<host>-<pid>`, or `-<pid>` alone as hsm named them before it recorded the host.
  const leftover = new RegExp(`^${literal(prefix)}(?:(.*)-)?(\\d+)$`);
  for (const name of await readdir(parent).catch(() => [] as string[])) {
    const m = leftover.exec(name);
    if (!m || (m[1] !== undefined && m[1] !== host) || processRunning(Number(m[2]))) continue;
    await rm(join(parent, name), { recursive: true, force: true }).catch(() => {});
  }
  try {
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir);
  } catch (err) {
    // Named by the output asked for (a read-only or full file system), not by the hidden folder.
    throw fileError(err, path, "write");
  }
  return { dir, forget: onStopSignal(() => rmSync(dir, { recursive: true, force: true })) };
}

/**
 * What is at a path the user named, told apart honestly: missing is one thing,
 * present but unreadable (permissions, a symbolic-link loop, a name too long)
 * is another, and the OS's reason is passed on.
 */
import { access, constants, stat } from "node:fs/promises";

import { HsmError, UsageError } from "../errors.js";

/** `EACCES: permission denied` from Node's `EACCES: permission denied, stat '/x'`. */
function osReason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return (e.message ?? String(err)).split(", ")[0] ?? String(err);
}

/** "missing", "folder" or "file"; any other failure to look is an HsmError with the OS's reason. */
export async function pathKind(path: string, what: string): Promise<"missing" | "folder" | "file"> {
  try {
    return (await stat(path)).isDirectory() ? "folder" : "file";
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "missing";
    throw new HsmError(`${path}: the ${what} cannot be read (${osReason(err)})`, { cause: err });
  }
}

/** The modification time of `path`, or undefined when nothing is there. */
export async function mtimeOf(path: string, what: string): Promise<number | undefined> {
  try {
    return (await stat(path)).mtimeMs;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new HsmError(`${path}: the ${what} cannot be read (${osReason(err)})`, { cause: err });
  }
}

/** Checks that `path` is a store folder this process may read; says what is wrong otherwise. */
export async function requireStoreFolder(path: string): Promise<void> {
  const kind = await pathKind(path, "store folder");
  if (kind === "missing") throw new UsageError(`${path}: no such store folder`);
  if (kind === "file") throw new UsageError(`${path}: is a file, not a store folder`);
  try {
    await access(path, constants.R_OK | constants.X_OK);
  } catch (err) {
    throw new HsmError(`${path}: the store folder cannot be read (${osReason(err)})`, { cause: err });
  }
}

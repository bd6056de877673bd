/**
 * Where a store's bytes come from. The reader asks only for byte ranges of named
 * files, so it runs the same over a folder, an in-memory map (tests) or, later,
 * object storage.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";

import { FileError, StoreError } from "../errors.js";
import { fileError, openInput, readInput, TEXT_FILE_MAX_BYTES } from "../util/fs.js";
import { layerOfFileName } from "./names.js";
import { MANIFEST_NAME } from "./manifest.js";

/**
 * A store's source of bytes. Every method rejects with an hsm error naming the
 * file: a {@link FileError} for a file that is missing or cannot be read.
 */
export interface StoreBackend {
  /** A human-readable location for messages. */
  readonly location: string;
  /** Whole small files (the manifest). */
  readAll(name: string): Promise<Uint8Array>;
  /** Up to `length` bytes from `offset`; shorter only at the end of the file. Read into `into` (at least `length` bytes) where given. */
  read(name: string, offset: number, length: number, into?: Uint8Array): Promise<Uint8Array>;
  size(name: string): Promise<number>;
  /** The store file names present (`index.json`, `L###.npy`); other names are left out. */
  list(): Promise<string[]>;
  close(): Promise<void>;
}

function isStoreFileName(name: string): boolean {
  return name === MANIFEST_NAME || layerOfFileName(name) !== undefined;
}

/** Only the manifest and plain `L###.npy` names are ever opened. */
function guard(name: string, location: string): void {
  if (!isStoreFileName(name)) {
    throw new StoreError(
      location,
      `refusing to open "${name}", which is not a store file name (index.json or L###.npy)`,
    );
  }
}

/** A store in a folder. Files are opened once and kept open until `close`. */
export function directoryBackend(dir: string): StoreBackend {
  const handles = new Map<string, Promise<import("node:fs/promises").FileHandle>>();
  const handle = (name: string) => {
    guard(name, dir);
    let h = handles.get(name);
    if (!h) {
      h = (async () => {
        const path = join(dir, name);
        return (await openInput(path)).fh;
      })();
      handles.set(name, h);
    }
    return h;
  };
  return {
    location: dir,
    async readAll(name) {
      guard(name, dir);
      return readInput(join(dir, name), { maxBytes: TEXT_FILE_MAX_BYTES, what: "a store's manifest" });
    },
    async read(name, offset, length, into) {
      const fh = await handle(name);
      const out = into ?? Buffer.allocUnsafeSlow(length);
      let got = 0;
      try {
        while (got < length) {
          const { bytesRead } = await fh.read(out, got, length - got, offset + got);
          if (bytesRead === 0) break;
          got += bytesRead;
        }
      } catch (err) {
        throw fileError(err, join(dir, name));
      }
      return got === out.length ? out : out.subarray(0, got);
    },
    async size(name) {
      const fh = await handle(name);
      try {
        return (await fh.stat()).size;
      } catch (err) {
        throw fileError(err, join(dir, name));
      }
    },
    async list() {
      try {
        return (await readdir(dir)).filter(isStoreFileName).sort();
      } catch (err) {
        throw fileError(err, dir);
      }
    },
    async close() {
      const all = [...handles.values()];
      handles.clear();
      // A handle whose open failed has nothing to close.
      await Promise.all(all.map((h) => h.then((fh) => fh.close()).catch(() => {})));
    },
  };
}

/** A store held in memory, for tests and for stores built on the fly. */
export function memoryBackend(files: Map<string, Uint8Array>, location = "<memory>"): StoreBackend {
  const get = (name: string) => {
    guard(name, location);
    const f = files.get(name);
    if (!f) throw new FileError(`${location}/${name}`, "missing", "ENOENT", "does not exist");
    return f;
  };
  return {
    location,
    async readAll(name) {
      return get(name);
    },
    async read(name, offset, length, into) {
      const bytes = get(name).subarray(offset, offset + length);
      if (!into) return bytes;
      into.set(bytes);
      return into.subarray(0, bytes.length);
    },
    async size(name) {
      return get(name).length;
    },
    async list() {
      return [...files.keys()].filter(isStoreFileName).sort();
    },
    async close() {},
  };
}

/**
 * Initializers kept as external data, as onnxruntime reads them: in a file
 * inside the model's folder, at an offset, of the tensor's size.
 */
import { stat } from "node:fs/promises";
import { isAbsolute, join, normalize, sep } from "node:path";

import { ModelDirError } from "./model-dir.js";
import { externalDataEntry, num, type GraphProto, type TensorProto } from "../onnx/graph.js";

/**
 * Where initializer `t` of the model at `modelDir` keeps its values as external data: the file (inside the model's
 * folder, as onnxruntime requires), the offset, and the length (`bytes`, the tensor's size, which a `length` entry
 * must equal). A missing, outside or inconsistent entry fails naming the initializer.
 */
export function externalFile(t: TensorProto, modelDir: string, bytes: number): { path: string; offset: number } {
  const entry = (key: "offset" | "length") => externalDataEntry(t, key);
  const location = externalLocation(t, modelDir);
  const offset = Number(entry("offset") ?? 0);
  const length = entry("length");
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new ModelDirError(
      modelDir,
      `initializer ${t.name} has external-data offset ${JSON.stringify(entry("offset"))}`,
    );
  if (length !== undefined && Number(length) !== bytes) {
    throw new ModelDirError(
      modelDir,
      `initializer ${t.name} has ${length} bytes of external data where its shape needs ${bytes}`,
    );
  }
  return { path: join(modelDir, location), offset };
}

/**
 * The file initializer `t` keeps its values in, relative to the model's folder `modelDir` and normalized
 * (`weights.bin`, `weights/model.bin`); a missing location, or one outside the folder, fails naming the initializer.
 */
function externalLocation(t: TensorProto, modelDir: string): string {
  const location = externalDataEntry(t, "location");
  if (!location) throw new ModelDirError(modelDir, `initializer ${t.name} has no values`);
  // As onnxruntime requires: external data lies inside the model's folder.
  const inside = normalize(location);
  if (isAbsolute(inside) || inside === ".." || inside.startsWith(`..${sep}`)) {
    throw new ModelDirError(
      modelDir,
      `initializer ${t.name} keeps its values in ${JSON.stringify(location)}, outside the model folder`,
    );
  }
  return inside;
}

/** The initializers `graph` keeps as external data, those of its subgraphs (If and Loop bodies) too. */
function externalInitializers(graph: GraphProto): TensorProto[] {
  return [
    ...(graph.initializer ?? []).filter((t) => t.dataLocation === 1), // EXTERNAL
    ...(graph.node ?? []).flatMap((n) =>
      (n.attribute ?? []).flatMap((a) => [a.g, ...(a.graphs ?? [])].flatMap((g) => (g ? externalInitializers(g) : []))),
    ),
  ];
}

/**
 * The files the initializers of `graph` (from the model folder `modelDir`) keep their values in, each once, relative
 * to the folder: exactly the files onnxruntime opens beside the graph, whatever their names (`model.onnx_data`,
 * `weights.bin`, one file per tensor, `weights/model.bin` in a subfolder).
 */
export function externalDataFiles(graph: GraphProto, modelDir: string): string[] {
  return [...new Set(externalInitializers(graph).map((t) => externalLocation(t, modelDir)))];
}

/** Bytes per element of the ONNX types weights are stored in (the 4-bit INT4 and UINT4: half a byte). */
const ELEMENT_BYTES: Readonly<Record<number, number>> = {
  1: 4, // FLOAT
  2: 1, // UINT8
  3: 1, // INT8
  4: 2, // UINT16
  5: 2, // INT16
  6: 4, // INT32
  7: 8, // INT64
  9: 1, // BOOL
  10: 2, // FLOAT16
  11: 8, // DOUBLE
  12: 4, // UINT32
  13: 8, // UINT64
  16: 2, // BFLOAT16
  21: 0.5, // UINT4
  22: 0.5, // INT4
};

/**
 * Checks that every initializer `graph` keeps as external data has its values: a file inside the model's folder
 * `modelDir`, long enough for the bytes the initializer names (its `length` entry, else its shape's size). Run
 * before a session is made, so that a missing or cut weight file is named here, not in onnxruntime's words about
 * a staging folder.
 */
export async function checkExternalData(graph: GraphProto, modelDir: string): Promise<void> {
  const sizes = new Map<string, number | null>();
  for (const t of externalInitializers(graph)) {
    const per = ELEMENT_BYTES[t.dataType ?? 0];
    const shaped = per === undefined ? undefined : Math.ceil((t.dims ?? []).reduce((a: number, d) => a * num(d), per));
    const named = externalDataEntry(t, "length");
    const bytes = named !== undefined ? Number(named) : shaped;
    if (bytes === undefined) continue; // a type of unknown size: onnxruntime checks it
    const { path, offset } = externalFile(t, modelDir, bytes);
    if (!sizes.has(path)) sizes.set(path, (await stat(path).catch(() => undefined))?.size ?? null);
    const size = sizes.get(path)!;
    if (size === null)
      throw new ModelDirError(path, `does not exist, but initializer ${t.name} keeps its values there`);
    if (offset + bytes > size)
      throw new ModelDirError(
        path,
        `ends before initializer ${t.name}'s ${bytes} bytes at offset ${offset} (the file holds ${size})`,
      );
  }
}

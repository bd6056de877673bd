/**
 * Initializers kept as external data, as onnxruntime reads them: in a file
 * inside the model's folder, at an offset, of the tensor's size.
 */
import { isAbsolute, join, normalize, sep } from "node:path";

import { ModelDirError } from "./model-dir.js";
import { externalDataEntry, type TensorProto } from "../onnx/graph.js";

/**
 * Where initializer `t` of the model at `modelDir` keeps its values as external data: the file (inside the model's
 * folder, as onnxruntime requires), the offset, and the length (`bytes`, the tensor's size, which a `length` entry
 * must equal). A missing, outside or inconsistent entry fails naming the initializer.
 */
export function externalFile(t: TensorProto, modelDir: string, bytes: number): { path: string; offset: number } {
  const entry = (key: "location" | "offset" | "length") => externalDataEntry(t, key);
  const location = entry("location");
  if (!location) throw new ModelDirError(modelDir, `initializer ${t.name} has no values`);
  // As onnxruntime requires: external data lies inside the model's folder.
  const inside = normalize(location);
  if (isAbsolute(inside) || inside === ".." || inside.startsWith(`..${sep}`)) {
    throw new ModelDirError(
      modelDir,
      `initializer ${t.name} keeps its values in ${JSON.stringify(location)}, outside the model folder`,
    );
  }
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
  return { path: join(modelDir, inside), offset };
}

/**
 * Renaming passes over a written model, for graphs whose names say nothing:
 *
 * - `dynamo-names`: as the torch dynamo exporter names things, values after
 *   their operator (`add_7`, `matmul_3`) and nodes after their first output
 *   (`node_add_7`);
 * - `anonymous`: as optimizers and slimmers leave graphs, no node names and
 *   values (initializers included) under seeded random names.
 *
 * The graph's inputs and outputs keep their names (they are how a graph is
 * fed and read), and so does everything else the computation depends on: the
 * renamed graph computes exactly what the original does.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

import { Rng } from "../util/random.js";
import { decodeModel, encodeModel, type GraphProto } from "../onnx/graph.js";

export type RenameStyle = "dynamo-names" | "anonymous";
export const RENAME_STYLES: readonly RenameStyle[] = ["dynamo-names", "anonymous"];

/** Subgraphs held by a graph's nodes (If branches, Loop bodies). */
function subgraphs(graph: GraphProto): GraphProto[] {
  return (graph.node ?? []).flatMap((n) =>
    (n.attribute ?? []).flatMap((a) => [a.g, ...(a.graphs ?? [])].filter((g): g is GraphProto => !!g)),
  );
}

/**
 * Renames the values and nodes of `graph` (and its subgraphs) in place;
 * returns the map from old value names to new ones.
 */
export function renameGraph(graph: GraphProto, style: RenameStyle, seed = 1): Map<string, string> {
  const keep = new Set([...(graph.input ?? []), ...(graph.output ?? [])].map((v) => v.name!));
  const map = new Map<string, string>();
  const used = new Set<string>();
  const counts = new Map<string, number>();
  const rng = new Rng(seed, 77);
  const fresh = (op: string): string => {
    if (style === "anonymous") {
      for (;;) {
        const name = `t${rng.u32().toString(36)}`;
        if (!keep.has(name) && !used.has(name)) return (used.add(name), name);
      }
    }
    const base = op.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();
    const k = counts.get(base) ?? 0;
    counts.set(base, k + 1);
    return k === 0 ? base : `${base}_${k}`;
  };
  const visit = (g: GraphProto) => {
    if (style === "anonymous")
      for (const t of g.initializer ?? [])
        if (!keep.has(t.name!) && !map.has(t.name!)) map.set(t.name!, fresh("Initializer"));
    for (const n of g.node ?? []) {
      for (const o of n.output ?? []) if (o && !keep.has(o) && !map.has(o)) map.set(o, fresh(n.opType ?? "value"));
      for (const sub of subgraphs({ node: [n] })) visit(sub);
    }
  };
  visit(graph);
  const apply = (g: GraphProto) => {
    const to = (name: string) => map.get(name) ?? name;
    for (const t of g.initializer ?? []) t.name = to(t.name!);
    for (const v of [...(g.input ?? []), ...(g.output ?? []), ...(g.valueInfo ?? [])]) v.name = to(v.name!);
    for (const n of g.node ?? []) {
      n.input = (n.input ?? []).map((i) => (i ? to(i) : i));
      n.output = (n.output ?? []).map((o) => (o ? to(o) : o));
      n.name = style === "anonymous" ? "" : `node_${n.output[0] ?? n.opType}`;
    }
    subgraphs(g).forEach(apply);
  };
  apply(graph);
  return map;
}

/** Rewrites `dir/model.onnx` with its names replaced in `style`; returns the value-name map. */
export async function renameModelFile(dir: string, style: RenameStyle, seed = 1): Promise<Map<string, string>> {
  const path = join(dir, "model.onnx");
  const model = decodeModel(await readFile(path));
  const map = renameGraph(model.graph!, style, seed);
  await writeFile(path, encodeModel(model));
  return map;
}

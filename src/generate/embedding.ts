/**
 * Generation's token embedding outside onnxruntime. The Gather that reads
 * `input_ids`' rows out of a float32 embedding `[V, d]` leaves the graph,
 * which takes those rows as an input instead ({@link INPUTS_EMBEDS}); each
 * step reads them from the model's file, row by row. A session would map the
 * whole table and keep every page decoding touches, once per decoding
 * thread; read this way, the rows cost only the page cache, shared by all.
 * Rows are copied bit for bit, so the graph computes what it did with the
 * Gather inside.
 */
import { readSync } from "node:fs";

import { HsmError } from "../errors.js";
import { externalDataEntry, graphIndex, num, valueInfo, DataType, type GraphProto } from "../onnx/graph.js";
import { fileError, openInput } from "../util/fs.js";
import { externalFile } from "../model/external-data.js";

/** The graph input that replaces the embedding's Gather: `[B, T, d]` float32. */
export const INPUTS_EMBEDS = "hsm_inputs_embeds";

/** Where an embedding's rows lie: row v is `d` float32 values at `offset + 4 d v` of `path`. */
export interface EmbeddingSource {
  path: string;
  offset: number;
  vocab: number;
  d: number;
}

/**
 * Takes the embedding out of `graph`, in place, where one Gather (axis 0) reads rows of a float32 `[V, d]`
 * initializer that nothing else reads, kept as external data (as a staged graph keeps its weights), at
 * `input_ids` or a Cast of it: that Gather's output is then {@link INPUTS_EMBEDS}. `source` names the file the
 * locations `sourceName` stand for; other locations lie in `modelDir`. Undefined, and the graph unchanged, where
 * there is no such Gather.
 */
export function takeEmbeddingOut(
  graph: GraphProto,
  modelDir: string,
  source: { name: string; path: string },
): EmbeddingSource | undefined {
  const { consumers } = graphIndex(graph);
  const initializers = new Map((graph.initializer ?? []).map((t) => [t.name!, t]));
  const indices = [
    "input_ids",
    ...(consumers.get("input_ids") ?? []).filter((n) => n.opType === "Cast").map((n) => n.output![0]!),
  ];
  const inSubgraphs = subgraphInputs(graph);
  for (const name of indices) {
    for (const gather of consumers.get(name) ?? []) {
      const t = initializers.get(gather.input![0]!);
      const axis = gather.attribute?.find((a) => a.name === "axis")?.i;
      if (gather.opType !== "Gather" || gather.input![1] !== name || (axis !== undefined && num(axis) !== 0)) continue;
      if (!t || t.dataType !== DataType.FLOAT || t.dims?.length !== 2) continue;
      if (consumers.get(t.name!)!.length !== 1 || inSubgraphs.has(t.name!)) continue;
      const location = externalDataEntry(t, "location");
      if (location === undefined) continue;
      const vocab = num(t.dims[0]);
      const d = num(t.dims[1]);
      const file = externalFile(t, modelDir, vocab * d * 4);
      const path = location === source.name ? source.path : file.path;
      graph.node = graph.node!.map((n) =>
        n === gather ? { name: "/hsm/inputs_embeds", opType: "Identity", input: [INPUTS_EMBEDS], output: n.output } : n,
      );
      graph.initializer = graph.initializer!.filter((x) => x !== t);
      graph.input = [
        ...(graph.input ?? []).filter((v) => v.name !== t.name),
        valueInfo(INPUTS_EMBEDS, DataType.FLOAT, ["batch_size", "sequence_length", d]),
      ];
      return { path, offset: file.offset, vocab, d };
    }
  }
  return undefined;
}

/** Every name a node of a subgraph (If/Loop body) of `graph` reads. */
function subgraphInputs(graph: GraphProto): Set<string> {
  const names = new Set<string>();
  const walk = (g: GraphProto, top: boolean) => {
    for (const n of g.node ?? []) {
      if (!top) for (const i of n.input ?? []) if (i) names.add(i);
      for (const a of n.attribute ?? []) for (const sub of [a.g, ...(a.graphs ?? [])]) if (sub) walk(sub, false);
    }
  };
  walk(graph, true);
  return names;
}

/** An open embedding file: the rows of token ids as one array, read from the page cache. */
export class EmbeddingRows {
  private constructor(
    private readonly source: EmbeddingSource,
    private readonly fh: Awaited<ReturnType<typeof openInput>>["fh"],
  ) {}

  static async open(source: EmbeddingSource): Promise<EmbeddingRows> {
    try {
      return new EmbeddingRows(source, (await openInput(source.path, { follow: true })).fh);
    } catch (err) {
      throw fileError(err, source.path);
    }
  }

  /**
   * The rows of `ids`, one after another (`[ids.length, d]`), as the Gather computed them: a negative id counts
   * from the end, one outside the table fails naming it.
   */
  rows(ids: BigInt64Array): Float32Array {
    const { d, vocab, offset, path } = this.source;
    const out = new Float32Array(ids.length * d);
    const bytes = new Uint8Array(out.buffer);
    const rowBytes = 4 * d;
    const first = new Map<bigint, number>();
    ids.forEach((id, j) => {
      const seen = first.get(id);
      if (seen !== undefined) {
        out.copyWithin(j * d, seen * d, (seen + 1) * d);
        return;
      }
      first.set(id, j);
      const v = id < 0n ? id + BigInt(vocab) : id;
      if (v < 0n || v >= BigInt(vocab))
        throw new HsmError(`token id ${id} is outside the model's embedding of ${vocab} rows`);
      const at = offset + Number(v) * rowBytes;
      for (let done = 0; done < rowBytes;) {
        const n = readSync(this.fh.fd, bytes, j * rowBytes + done, rowBytes - done, at + done);
        if (n === 0) throw new HsmError(`${path} ends inside the embedding's row ${v}`);
        done += n;
      }
    });
    return out;
  }

  close(): Promise<void> {
    return this.fh.close();
  }
}

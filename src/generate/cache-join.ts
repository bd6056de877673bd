/**
 * The KV cache joined outside the graph, on the CPU. A cached decoder's
 * `present.*` output is `Concat(past, new)`: the whole cache, which the
 * onnxruntime binding copies into a fresh buffer every step — garbage the size
 * of the cache, a step at a time, that the collector reaches only late. Where
 * every present is such a Concat of its own past input, the graph outputs the
 * new positions instead, and the next step's past is joined here, in place in
 * one buffer that batches take in turn. The values are the same: Concat
 * copies, and so does the join.
 */
import * as ort from "onnxruntime-node";

import { InternalError } from "../errors.js";
import { graphIndex, num, type GraphProto } from "../onnx/graph.js";
import { isPresentOutput, pastFor } from "../onnx/kv-cache.js";

/** A past input whose next value is itself joined with a graph output's new positions on `axis`. */
export interface CacheJoin {
  past: string;
  /** The graph output holding the step's new positions. */
  output: string;
  /** The sequence axis, counted from 0. */
  axis: number;
}

/** The output that holds the new positions of `present`. */
const newPositions = (present: string) => `hsm_new_${present}`;

/**
 * Rewrites `graph` to output, for each present, the positions its Concat adds to the past, and returns how to
 * join them; undefined (the graph untouched) unless every present output is a Concat of its own past input first.
 */
export function outputNewPositions(graph: GraphProto): CacheJoin[] | undefined {
  const pastNames = new Set((graph.input ?? []).map((v) => v.name!));
  const ranks = new Map((graph.input ?? []).map((v) => [v.name!, v.type?.tensorType?.shape?.dim?.length]));
  const { producer } = graphIndex(graph);
  const presents = (graph.output ?? []).filter((o) => isPresentOutput(o.name!));
  if (presents.length === 0) return undefined;
  const joins: (CacheJoin & { fresh: string })[] = [];
  for (const p of presents) {
    const past = pastFor(p.name!, pastNames);
    const node = producer.get(p.name!);
    const rank = past && ranks.get(past);
    if (!past || !rank || node?.opType !== "Concat" || node.input?.length !== 2 || node.input[0] !== past) {
      return undefined;
    }
    const axis = num((node.attribute ?? []).find((a) => a.name === "axis")?.i);
    joins.push({ past, output: newPositions(p.name!), axis: axis < 0 ? axis + rank : axis, fresh: node.input[1]! });
  }
  for (const j of joins) {
    graph.node!.push({ name: `/hsm/cache_join/${j.past}`, opType: "Identity", input: [j.fresh], output: [j.output] });
  }
  const outputs = new Map(joins.map((j, i) => [presents[i]!, j.output]));
  graph.output = graph.output!.map((o) => {
    const name = outputs.get(o);
    return name ? { name, type: { tensorType: { elemType: o.type?.tensorType?.elemType } } } : o;
  });
  return joins.map(({ past, output, axis }) => ({ past, output, axis }));
}

type Data = Float32Array | Uint16Array;
type DataType = new (buffer: ArrayBuffer, offset: number, length: number) => Data;

/** Where one past tensor lies in the buffer: its first byte, and the positions its region holds per outer index. */
interface Region {
  offset: number;
  positions: number;
}

/**
 * The past tensors of a batch, joined from each step's new positions in one buffer kept from batch to batch. Each
 * tensor has a region of its own, laid out when the batch's first positions arrive with room for the positions the
 * batch may still add; each step then widens the tensor in place, outer index by outer index from the last (each
 * moves only forward, past the ones already moved), and writes the new positions into the gaps. A join that does
 * not fit its region lays the buffer out anew. One buffer instead of a second one to copy into halves the memory
 * the cache takes; the copying is the same.
 */
export class JoinedCache {
  private buffer = new ArrayBuffer(0);
  private regions: Region[] = [];
  /** The tensors the last join returned, which a step feeds back as its past. */
  private last: Record<string, ort.Tensor> = {};

  constructor(private readonly joins: readonly CacheJoin[]) {}

  /**
   * The next step's past: each of `past` (the step's, as fed) joined with the new positions of `results` (the step's
   * outputs: one, or one per chunk of rows in row order); `room` is how many more positions a region laid out now
   * should hold.
   */
  next(
    past: Readonly<Record<string, ort.Tensor>>,
    results: readonly ort.InferenceSession.ReturnType[],
    room: number,
  ): Record<string, ort.Tensor> {
    const plans = this.joins.map(({ past: name, output, axis }) => {
      const old = past[name]!;
      // A step run in chunks of rows (decode-batch.ts) returns the rows' new positions in pieces, in row order.
      const pieces = results.map((r) => r[output]!);
      if (pieces.some((t) => !t)) throw new InternalError(`the decoding step returned no ${output}`);
      const first = pieces[0]!;
      const freshDims = [pieces.reduce((n, t) => n + t.dims[0]!, 0), ...first.dims.slice(1)];
      const dims = old.dims.map((d, i) => (i === axis ? d + freshDims[axis]! : d));
      const off = (t: ort.Tensor) =>
        t.dims.length !== dims.length || t.dims.some((d, i) => i > 0 && d !== freshDims[i]);
      if (pieces.some(off) || freshDims.some((d, i) => i !== axis && d !== dims[i])) {
        const shapes = pieces.map((t) => `[${t.dims.join(", ")}]`).join(" + ");
        throw new InternalError(`${output} is ${shapes}, which does not join [${old.dims.join(", ")}]`);
      }
      const inner = dims.slice(axis + 1).reduce((x, y) => x * y, 1);
      const outer = dims.slice(0, axis).reduce((x, y) => x * y, 1);
      const b = freshDims[axis]! * inner;
      // Per outer index, its `b` new elements, from the piece that holds it.
      const add: Data[] = [];
      for (const t of pieces) {
        const data = t.data as Data;
        for (let at = 0; at < data.length; at += b) add.push(data.subarray(at, at + b));
      }
      if (add.length !== outer) throw new InternalError(`${output}'s pieces do not split on whole rows`);
      const width = (first.data as Data).BYTES_PER_ELEMENT;
      // Per outer index: `a` elements of the old past, then `b` new ones.
      return { name, type: first.type, add, old, dims, axis, outer, inner, width, a: old.dims[axis]! * inner, b };
    });
    // In place where every past is the tensor the last join returned and its region has room; else laid out anew.
    const inPlace = plans.every(
      (p, i) =>
        p.old === this.last[p.name] && this.regions[i] !== undefined && p.dims[p.axis]! <= this.regions[i].positions,
    );
    if (!inPlace) this.layOut(plans, room);
    const out: Record<string, ort.Tensor> = {};
    plans.forEach(({ name, type, add, old, dims, outer, a, b }, i) => {
      const View = add[0]!.constructor as DataType;
      const target = new View(this.buffer, this.regions[i]!.offset, outer * (a + b));
      if (inPlace) {
        // The old past lies at the start of the region, `a` elements an outer index; each moves to its wider place.
        for (let o = outer - 1; o >= 0; o--) {
          if (a > 0 && o > 0) target.copyWithin(o * (a + b), o * a, (o + 1) * a);
          target.set(add[o]!, o * (a + b) + a);
        }
      } else {
        const from = old.data as Data;
        for (let o = 0; o < outer; o++) {
          if (a > 0) target.set(from.subarray(o * a, (o + 1) * a), o * (a + b));
          target.set(add[o]!, o * (a + b) + a);
        }
      }
      out[name] = new ort.Tensor(type, target, dims);
    });
    this.last = out;
    return out;
  }

  /**
   * Lays out a region per past with room for `room` more positions, in a new buffer where the old one is too small
   * or holds a past still to be copied.
   */
  private layOut(
    plans: readonly {
      old: ort.Tensor;
      dims: readonly number[];
      axis: number;
      outer: number;
      inner: number;
      width: number;
    }[],
    room: number,
  ): void {
    let bytes = 0;
    this.regions = plans.map((p) => {
      const positions = p.dims[p.axis]! + room;
      const region = { offset: bytes, positions };
      bytes += align(p.width * p.outer * positions * p.inner);
      return region;
    });
    const reads = plans.some((p) => p.old.dims[p.axis]! > 0 && (p.old.data as Data).buffer === this.buffer);
    if (reads || this.buffer.byteLength < bytes) this.buffer = new ArrayBuffer(bytes);
  }
}

/** `bytes` rounded up to a cache line. */
const align = (bytes: number) => Math.ceil(bytes / 64) * 64;

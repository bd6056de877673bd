/**
 * The KV cache joined outside the graph, on the CPU. A cached decoder's
 * `present.*` output is `Concat(past, new)`: the whole cache, which the
 * onnxruntime binding copies into a fresh buffer every step — garbage the size
 * of the cache, a step at a time, that the collector reaches only late. Where
 * every present is such a Concat of its own past input, the graph outputs the
 * new positions instead, and the next step's past is joined here, in two
 * buffers per cache tensor that steps and batches take in turn. The values are
 * the same: Concat copies, and so does the join.
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

/** Where a buffer grows, it grows by half again at least: batches sorted by length grow the cache a little at a time. */
const GROWTH = 1.5;

/**
 * The past tensors of a batch, joined from each step's new positions. All of them live in one of two buffers, the
 * one the step reads and the one the next past is joined into; both are kept from batch to batch.
 */
export class JoinedCache {
  private readonly sides: [ArrayBuffer, ArrayBuffer] = [new ArrayBuffer(0), new ArrayBuffer(0)];
  private reading = 1;

  constructor(private readonly joins: readonly CacheJoin[]) {}

  /**
   * The next step's past: each of `past` (the step's, as fed) joined with `result`'s new positions; `room` is how
   * many more positions a buffer grown now should hold.
   */
  next(
    past: Readonly<Record<string, ort.Tensor>>,
    result: ort.InferenceSession.ReturnType,
    room: number,
  ): Record<string, ort.Tensor> {
    const plans = this.joins.map(({ past: name, output, axis }) => {
      const old = past[name]!;
      const fresh = result[output];
      if (!fresh) throw new InternalError(`the decoding step returned no ${output}`);
      const dims = old.dims.map((d, i) => (i === axis ? d + fresh.dims[axis]! : d));
      if (fresh.dims.length !== dims.length || fresh.dims.some((d, i) => i !== axis && d !== dims[i])) {
        throw new InternalError(
          `${output} is [${fresh.dims.join(", ")}], which does not join [${old.dims.join(", ")}]`,
        );
      }
      const inner = dims.slice(axis + 1).reduce((x, y) => x * y, 1);
      const outer = dims.slice(0, axis).reduce((x, y) => x * y, 1);
      // Per outer index: `a` elements of the old past, then `b` new ones.
      return { name, fresh, old, dims, outer, inner, a: old.dims[axis]! * inner, b: fresh.dims[axis]! * inner };
    });
    const width = (p: (typeof plans)[number]) => (p.fresh.data as Data).BYTES_PER_ELEMENT;
    const offsets: number[] = [];
    let need = 0;
    let grown = 0;
    for (const p of plans) {
      offsets.push(need);
      need += align(width(p) * p.outer * (p.a + p.b));
      grown += align(width(p) * p.outer * (p.a + p.b + room * p.inner));
    }
    const write = 1 - this.reading;
    if (this.sides[write]!.byteLength < need) {
      this.sides[write] = new ArrayBuffer(Math.max(grown, Math.ceil(GROWTH * this.sides[write]!.byteLength)));
    }
    this.reading = write;
    const out: Record<string, ort.Tensor> = {};
    plans.forEach(({ name, fresh, old, dims, outer, a, b }, i) => {
      const add = fresh.data as Data;
      const from = old.data as Data;
      const target = new (add.constructor as DataType)(this.sides[write]!, offsets[i]!, outer * (a + b));
      for (let o = 0; o < outer; o++) {
        if (a > 0) target.set(from.subarray(o * a, (o + 1) * a), o * (a + b));
        target.set(add.subarray(o * b, (o + 1) * b), o * (a + b) + a);
      }
      out[name] = new ort.Tensor(fresh.type, target, dims);
    });
    return out;
  }
}

/** `bytes` rounded up to a cache line. */
const align = (bytes: number) => Math.ceil(bytes / 64) * 64;

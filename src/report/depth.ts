/**
 * Normalized depth `l/(L−1)` and the pairing of two models' stored layers at
 * matched depth: models with different numbers of blocks are compared layer
 * by layer where they are equally deep.
 */

/** Layer `l` of a model of `L` blocks on [0, 1]; 0 for a one-block model. */
export function normalizedDepth(l: number, L: number): number {
  return L > 1 ? l / (L - 1) : 0;
}

/** A layer of model A and the layer of model B at the nearest normalized depth. */
export interface LayerPair {
  layerA: number;
  layerB: number;
  depthA: number;
  depthB: number;
}

/**
 * For every stored layer of A (ascending), B's stored layer whose normalized
 * depth is nearest; on a tie, the shallower of B's two layers. Depths are
 * compared as the exact fractions `l·(L_B−1)` against `l'·(L_A−1)`, so no
 * rounding decides a tie. Empty when either model has no stored layer.
 * @example matchDepth([2, 3], 4, [4, 5, 6, 7], 8) // 2 ↔ 5 (5/7 nearer 2/3 than 4/7), 3 ↔ 7
 */
export function matchDepth(
  layersA: readonly number[],
  LA: number,
  layersB: readonly number[],
  LB: number,
): LayerPair[] {
  const b = [...layersB].sort((x, y) => x - y);
  if (b.length === 0) return [];
  // Depths as integers over the common denominator (L_A−1)(L_B−1); a one-block model sits at 0.
  const scaledA = (l: number) => (LA > 1 ? l * Math.max(LB - 1, 1) : 0);
  const scaledB = (l: number) => (LB > 1 ? l * Math.max(LA - 1, 1) : 0);
  return [...layersA]
    .sort((x, y) => x - y)
    .map((layerA) => {
      const target = scaledA(layerA);
      let best = b[0]!;
      for (const l of b) if (Math.abs(scaledB(l) - target) < Math.abs(scaledB(best) - target)) best = l;
      return { layerA, layerB: best, depthA: normalizedDepth(layerA, LA), depthB: normalizedDepth(best, LB) };
    });
}

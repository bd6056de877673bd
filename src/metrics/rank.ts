/** ISS's rank kernel: rows of `x` (n × d) against anchors `a` (F × d). */
export type RankAgainstAnchors = (
  x: Float32Array,
  nRows: number,
  a: Float32Array,
  nAnchors: number,
  d: number,
  own: Int32Array,
  ownScore: Float32Array,
  above: Int32Array,
  threads: number,
) => void;

/**
 * The TypeScript twin of the native rank kernel (native/rank.cc): for each
 * query row, its score against its own anchor and how many other anchors score
 * strictly higher. Slow but plain: the reference the native kernel is tested against.
 */
export const rankAgainstAnchorsTs: RankAgainstAnchors = (x, nRows, a, nAnchors, d, own, ownScore, above) => {
  const acc = new Float32Array(1);
  for (let r = 0; r < nRows; r++) {
    above[r] = 0;
    const o = own[r]!;
    if (o < 0) {
      ownScore[r] = 0;
      continue;
    }
    acc[0] = 0;
    for (let k = 0; k < d; k++) acc[0] += x[r * d + k]! * a[o * d + k]!;
    const s = acc[0]!;
    ownScore[r] = s;
    let count = 0;
    for (let g = 0; g < nAnchors; g++) {
      if (g === o) continue;
      acc[0] = 0;
      for (let k = 0; k < d; k++) acc[0] += x[r * d + k]! * a[g * d + k]!;
      if (acc[0]! > s) count++;
    }
    above[r] = count;
  }
};

/**
 * The TypeScript twin of the native rank kernel (native/rank.cc): for each
 * query row, its float32 score against its own anchor and how many other
 * anchors score strictly higher. Plain loops over the selected rows in place
 * (no copy of them); slow, the reference the other backends are tested against.
 */
export function rankTs(
  x: Float32Array,
  rows: Int32Array,
  a: Float32Array,
  nAnchors: number,
  d: number,
  own: Int32Array,
  ownScore: Float32Array,
  above: Int32Array,
): void {
  const acc = new Float32Array(1);
  for (let r = 0; r < rows.length; r++) {
    above[r] = 0;
    const o = own[r]!;
    if (o < 0) {
      ownScore[r] = 0;
      continue;
    }
    const xo = rows[r]! * d;
    acc[0] = 0;
    for (let k = 0; k < d; k++) acc[0] += x[xo + k]! * a[o * d + k]!;
    const s = acc[0]!;
    ownScore[r] = s;
    let count = 0;
    for (let g = 0; g < nAnchors; g++) {
      if (g === o) continue;
      acc[0] = 0;
      for (let k = 0; k < d; k++) acc[0] += x[xo + k]! * a[g * d + k]!;
      if (acc[0]! > s) count++;
    }
    above[r] = count;
  }
}

/**
 * Case folding against Python's `str.casefold` (full folding, CaseFolding.txt
 * C + F) for every code point both Unicode versions assign, alone and after
 * NFKC as the comparison form applies it, and for strings where context matters.
 */
import { describe, expect, it } from "vitest";

import { caseFold } from "../../src/score/case-fold.js";
import { normalizeAnswer } from "../../src/score/scorer.js";
import { hasPython, numpyRequired, python } from "../helpers/numpy.js";

const withPython = hasPython || numpyRequired ? it : it.skip;
const skipReason =
  hasPython || numpyRequired ? "" : " (skipped: no python3; set HSM_REQUIRE_NUMPY=1 to make that a failure)";

/** Python's folds: the code points it leaves unassigned, and those whose fold (alone, after NFKC) changes them. */
const PY_FOLDS = `
import json, sys, unicodedata
unassigned, fold, nfkc = [], {}, {}
for cp in range(0x110000):
    if 0xD800 <= cp < 0xE000:
        continue
    ch = chr(cp)
    if unicodedata.category(ch) == "Cn":
        unassigned.append(cp)
        continue
    if ch.casefold() != ch:
        fold[cp] = ch.casefold()
    n = unicodedata.normalize("NFKC", ch).casefold()
    if n != ch:
        nfkc[cp] = n
strings = json.loads(sys.argv[1])
json.dump({"unassigned": unassigned, "fold": fold, "nfkc": nfkc,
           "strings": [unicodedata.normalize("NFKC", s).casefold() for s in strings]}, sys.stdout)
`;

/** Strings where a fold depends on more than one code point in JavaScript's lower-casing (final sigma), or expands. */
const STRINGS = [
  "Straße",
  "STRASSE",
  "ΟΔΟΣ ΟΔΟΣ.",
  "ὈΔΥΣΣΕΎΣ",
  "İstanbul",
  "DİYARBAKIR ılık",
  "ẞ",
  "ᏣᎳᎩ ꮳꮃꭹ",
  "ﬁnal ﬀ ŉ",
  "Ǆ ǅ ǆ",
  "ΐ ΰ",
];

describe("case folding", () => {
  withPython(`equals Python's str.casefold for every code point both assign, alone and after NFKC${skipReason}`, () => {
    const py = JSON.parse(python(PY_FOLDS, JSON.stringify(STRINGS))) as {
      unassigned: number[];
      fold: Record<string, string>;
      nfkc: Record<string, string>;
      strings: string[];
    };
    const unassigned = new Set(py.unassigned);
    const wrong: string[] = [];
    let compared = 0;
    for (let cp = 0; cp <= 0x10ffff; cp++) {
      if (cp >= 0xd800 && cp < 0xe000) continue;
      const ch = String.fromCodePoint(cp);
      // A code point only one of the two Unicode versions assigns has no fold to compare.
      if (unassigned.has(cp) || /\p{Cn}/u.test(ch)) continue;
      compared++;
      const fold = caseFold(ch);
      if (fold !== (py.fold[cp] ?? ch)) wrong.push(`U+${cp.toString(16)}: ${fold} (Python ${py.fold[cp] ?? ch})`);
      const nfkc = caseFold(ch.normalize("NFKC"));
      if (nfkc !== (py.nfkc[cp] ?? ch)) wrong.push(`U+${cp.toString(16)} after NFKC: ${nfkc} (Python ${py.nfkc[cp]})`);
    }
    expect(wrong).toEqual([]);
    expect(compared).toBeGreaterThan(140_000);
    expect(STRINGS.map((s) => caseFold(s.normalize("NFKC")))).toEqual(py.strings);
  });

  it("folds by hand-checked cases", () => {
    expect(caseFold("STRASSE")).toBe("strasse");
    expect(caseFold("Straße")).toBe("strasse");
    expect(caseFold("ẞ")).toBe("ss");
    expect(caseFold("ΟΔΟΣ")).toBe("οδοσ"); // not the final ς that toLowerCase gives
    expect(caseFold("οδος")).toBe("οδοσ");
    expect(caseFold("ı")).toBe("ı");
    expect(caseFold("İ")).toBe("i\u0307");
    expect(caseFold("ꭰ")).toBe("Ꭰ"); // Cherokee folds to its upper case
    expect(caseFold("Hello, World")).toBe("hello, world");
  });

  it("makes answers that differ only in case equal in the comparison form", () => {
    expect(normalizeAnswer("STRASSE")).toBe(normalizeAnswer("Straße"));
    expect(normalizeAnswer("ΟΔΟΣ")).toBe(normalizeAnswer("οδος"));
    expect(normalizeAnswer("ᏣᎳᎩ")).toBe(normalizeAnswer("ꮳꮃꭹ"));
  });
});

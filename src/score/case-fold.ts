/**
 * Full Unicode case folding (CaseFolding.txt, statuses C and F: what Python's
 * `str.casefold` does), for comparing answers without regard to case.
 *
 * JavaScript has no case folding, but upper-casing a code point and then
 * lower-casing the result folds every code point the same as CaseFolding.txt
 * does (ß → ss, ﬁ → fi, ς → σ, İ → i̇), except those below; a test checks
 * that against Python for every assigned code point. It is done one code point
 * at a time because `toLowerCase` on a whole string looks at the context: it
 * lower-cases Σ at a word's end to ς, which case folding maps to σ.
 */

/** The code points whose fold is not `toUpperCase().toLowerCase()`, and why. */
function foldException(cp: number, ch: string): string | undefined {
  // Dotless ı folds to itself: its upper case is I, whose lower case is i.
  if (cp === 0x131) return ch;
  // Capital sharp S folds to "ss"; its lower case is ß, which folds to "ss" too.
  if (cp === 0x1e9e) return "ss";
  // Cherokee folds to its upper case (the older letters), not to its lower case.
  if ((cp >= 0x13a0 && cp <= 0x13ff) || (cp >= 0xab70 && cp <= 0xabbf)) return ch.toUpperCase();
  return undefined;
}

/** Anything but ASCII, which `toLowerCase` alone folds (the common case). */
const NON_ASCII = /[^\p{ASCII}]/u;

/**
 * Case-folds `text` (full folding, as Python's `str.casefold`).
 * @example caseFold("STRASSE") === caseFold("Straße") // both "strasse"
 */
export function caseFold(text: string): string {
  if (!NON_ASCII.test(text)) return text.toLowerCase();
  let out = "";
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    out += cp < 0x80 ? ch.toLowerCase() : (foldException(cp, ch) ?? ch.toUpperCase().toLowerCase());
  }
  return out;
}

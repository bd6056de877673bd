/** Option parsers that turn bad flags into usage errors with the flag's name. */
import { UsageError } from "../errors.js";

export function intOption(flag: string, min = 0): (value: string) => number {
  return (value: string) => {
    const n = /^[0-9]+$/.test(value.trim()) ? Number(value) : NaN;
    if (!Number.isSafeInteger(n) || n < min) {
      throw new UsageError(`Expected an integer of at least ${min} for ${flag} but received "${value}"`);
    }
    return n;
  };
}

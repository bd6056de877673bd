/** Words for a POSIX shell, in the commands hsm prints for the user to run. */

/** A word for a POSIX shell: quoted only when it must be. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_./:=+,@%-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

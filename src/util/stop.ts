/**
 * What a signal that stops the command line (SIGINT from Ctrl-C, SIGTERM from
 * `kill` or a scheduler preempting a job, SIGHUP) must not leave behind: the
 * store locks this process holds and the temporary files it is writing. Node
 * runs no `exit` handlers when a signal ends the process, so these cleanups run
 * from the signal itself, then the signal is raised again with its default
 * action: the process still ends by it (exit status 128 + its number), as a
 * scheduler expects. Only the CLI installs the handlers; a program using hsm as
 * a library keeps its own signal handling.
 */
const cleanups = new Set<() => void>();
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
let installed = false;

/** Runs `cleanup` (synchronous, never throwing) if a signal stops the process; the returned function forgets it. */
export function onStopSignal(cleanup: () => void): () => void {
  cleanups.add(cleanup);
  return () => void cleanups.delete(cleanup);
}

function stop(signal: NodeJS.Signals): void {
  for (const cleanup of cleanups) {
    try {
      cleanup();
    } catch {
      // each cleanup is best effort: the process is ending
    }
  }
  cleanups.clear();
  for (const s of SIGNALS) process.removeListener(s, stop);
  process.kill(process.pid, signal);
}

/** Installs the handlers (once per process). */
export function cleanUpOnStopSignals(): void {
  if (installed) return;
  installed = true;
  for (const s of SIGNALS) process.on(s, stop);
}

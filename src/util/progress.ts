/**
 * Progress on stderr: a redrawn line with rate and ETA on a terminal, a plain
 * line every few seconds otherwise (logs, CI, and a terminal that declares
 * itself unable to move its cursor, TERM=dumb), nothing with `quiet`.
 */
export interface Progress {
  /** Reports `done` units; `total` may be learnt late and change. */
  update(done: number, total?: number, phase?: string): void;
  /** Finishes: prints `message` (by default a count and the time taken), or with null only clears the line. */
  end(message?: string | null): void;
}

/** A terminal line is redrawn at most ten times a second: smooth to watch, cheap to draw. */
const TTY_INTERVAL_MS = 100;
/** A log (not a terminal) gets a line every five seconds, so long runs leave a readable trail, not a flood. */
const LOG_INTERVAL_MS = 5000;

export function createProgress(
  label: string,
  total: number,
  options: { quiet?: boolean; unit?: string; stream?: NodeJS.WriteStream } = {},
): Progress {
  const stream = options.stream ?? process.stderr;
  if (options.quiet) return { update() {}, end() {} };
  // A dumb terminal (Emacs's shell, some CI consoles) would print the redraw's escape sequence as text.
  const tty = Boolean(stream.isTTY) && process.env.TERM !== "dumb";
  const unit = options.unit ?? "rows";
  const start = performance.now();
  // The first periodic line comes one interval after the start, not at once.
  let last = start;
  let lastDone = 0;
  const line = (done: number, phase?: string) => {
    const secs = (performance.now() - start) / 1000;
    const rate = done / Math.max(secs, 1e-9);
    const eta = rate > 0 ? (total - done) / rate : Infinity;
    const pct = total > 0 ? ((100 * done) / total).toFixed(1) : "100.0";
    return `${label}${phase ? ` [${phase}]` : ""}: ${done}/${total} ${unit} (${pct}%), ${fmtRate(rate)} ${unit}/s, ETA ${fmtTime(eta)}`;
  };
  return {
    update(done, newTotal, phase) {
      if (newTotal !== undefined) total = newTotal;
      lastDone = done;
      const now = performance.now();
      // Completion is reported once, by end(); here only the way there.
      if (done === 0 || done >= total || now - last < (tty ? TTY_INTERVAL_MS : LOG_INTERVAL_MS)) return;
      last = now;
      stream.write(tty ? `\r\x1b[K${line(done, phase)}` : `${line(done, phase)}\n`);
    },
    end(message) {
      if (message === null) {
        if (tty) stream.write("\r\x1b[K");
        return;
      }
      const secs = ((performance.now() - start) / 1000).toFixed(1);
      const text = message ?? `${label}: ${lastDone} ${unit} in ${secs} s`;
      stream.write(tty ? `\r\x1b[K${text}\n` : `${text}\n`);
    },
  };
}

function fmtRate(r: number): string {
  return r >= 100 ? r.toFixed(0) : r.toFixed(1);
}

function fmtTime(s: number): string {
  if (!Number.isFinite(s)) return "?";
  if (s < 60) return `${s.toFixed(0)} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

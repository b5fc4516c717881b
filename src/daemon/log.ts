/** The daemon's log lines: a repeated line is printed once, then summed up. */

const REPEAT_WINDOW_MS = 10_000;
/** Distinct lines counted at once; past them a line is printed as it comes. */
const REPEAT_KEYS = 1000;

/**
 * The operator's log: a line is printed once, and the same line again within REPEAT_WINDOW_MS
 * is counted, then printed once as a summary (how many more, first and last time) when the
 * window ends, so a client repeating a failure cannot fill the log. Main thread only.
 */
export class LogLines {
  readonly #out: (line: string) => void;
  readonly #seen = new Map<string, { more: number; first: number; last: number; timer: NodeJS.Timeout }>();

  constructor(out: (line: string) => void) {
    this.#out = out;
  }

  line(text: string): void {
    const now = Date.now();
    const seen = this.#seen.get(text);
    if (seen !== undefined) {
      seen.more++;
      seen.last = now;
      return;
    }
    this.#out(text);
    if (this.#seen.size >= REPEAT_KEYS) return;
    const timer = setTimeout(() => this.#summary(text), REPEAT_WINDOW_MS);
    timer.unref();
    this.#seen.set(text, { more: 0, first: now, last: now, timer });
  }

  #summary(text: string): void {
    const s = this.#seen.get(text);
    if (s === undefined) return;
    clearTimeout(s.timer);
    this.#seen.delete(text);
    if (s.more > 0) this.#out(`${text} (${s.more} more time(s), ${new Date(s.first).toISOString()} to ${new Date(s.last).toISOString()})`);
  }

  /** Prints the summaries still counting. */
  close(): void {
    for (const text of [...this.#seen.keys()]) this.#summary(text);
  }
}

/** A progress bar on stderr when it is a terminal; otherwise a line every 10 %. */
export class Progress {
  readonly #label: string;
  readonly #total: number;
  readonly #tty: boolean;
  #shownTenth = -1;
  #lastDraw = 0;

  constructor(label: string, total: number, stream: NodeJS.WriteStream = process.stderr) {
    this.#label = label;
    this.#total = Math.max(1, total);
    this.#tty = stream.isTTY === true;
  }

  update(done: number): void {
    const frac = Math.min(1, done / this.#total);
    if (this.#tty) {
      const now = Date.now();
      if (now - this.#lastDraw < 100 && frac < 1) return;
      this.#lastDraw = now;
      const width = 30;
      const full = Math.round(frac * width);
      process.stderr.write(`\r${this.#label} [${'#'.repeat(full)}${' '.repeat(width - full)}] ${(frac * 100).toFixed(0).padStart(3)}%`);
      if (frac >= 1) process.stderr.write('\n');
    } else {
      const tenth = Math.floor(frac * 10);
      if (tenth > this.#shownTenth) {
        this.#shownTenth = tenth;
        process.stderr.write(`${this.#label}: ${tenth * 10}%\n`);
      }
    }
  }
}

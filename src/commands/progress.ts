// Progress of a long one-shot command on stderr (stdout keeps only the result): redrawn on one
// line on a terminal, otherwise a line at most every half second so a log is not flooded.

export interface Progress {
  update(line: string): void;
  /** Ends the progress line (a terminal's cursor moves to the next line). */
  done(): void;
}

export function progressOn(stream: NodeJS.WriteStream = process.stderr): Progress {
  const tty = stream.isTTY === true;
  const every = tty ? 100 : 500;
  let last = -Infinity;
  let drawn = false;
  return {
    update(line) {
      const now = Date.now();
      if (now - last < every) return;
      last = now;
      drawn = true;
      stream.write(tty ? `\r\x1b[K${line}` : `${line}\n`);
    },
    done() {
      if (tty && drawn) stream.write('\n');
    },
  };
}

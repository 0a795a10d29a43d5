// What the bench reads of a live process from /proc (Linux only). CPU time from /proc/<pid>/stat: utime + stime (fields 14 and 15, counted after
// the `)` that closes the command name, which may itself hold spaces), in clock ticks converted to
// µs with `getconf CLK_TCK`. The daemon's one-time execve keeps its pid and its CPU
// times, so a sample covers the whole life of the process, start-up included.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

let tickUs: number | undefined;

function clockTickUs(): number {
  if (tickUs === undefined) {
    let hz = 100; // the Linux default, should getconf be missing
    try {
      hz = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || hz;
    } catch {
      // keep the default
    }
    tickUs = 1_000_000 / hz;
  }
  return tickUs;
}

/**
 * User + system CPU µs of a process so far; null when it is gone or /proc is unavailable. With
 * `reapedChildren`, plus the CPU of its children that have exited and been waited for (cutime +
 * cstime, fields 16 and 17): redis-server forks for an AOF rewrite, and that work is Redis's too.
 */
export function cpuUs(pid: number, opts: { reapedChildren?: boolean } = {}): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is stat field 3 (state), so fields 14 and 15 are at 11 and 12, 16 and 17 at 13 and 14.
    let ticks = Number(fields[11]) + Number(fields[12]);
    if (opts.reapedChildren) ticks += Number(fields[13]) + Number(fields[14]);
    return Number.isFinite(ticks) ? ticks * clockTickUs() : null;
  } catch {
    return null;
  }
}

/** VmHWM (peak RSS) of a live process in bytes (0 when it is gone or /proc is unavailable). */
export function readHwm(pid: number): number {
  try {
    const m = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

// Summary of a `node --cpu-prof` profile: the top self-time functions, as text.
// Shared by `npm run bench` (compiled by tsc) and bench/cpu.ts (run type-stripped by Node 24), so
// it imports nothing relative at run time.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** The newest .cpuprofile in dir, or undefined when none was written. */
export function newestProfile(dir: string): string | undefined {
  let files: string[];
  try {
    files = readdirSync(dir);
  } catch {
    return undefined;
  }
  const file = files
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort()
    .pop();
  return file && join(dir, file);
}

/**
 * The top `n` self-time functions of the newest .cpuprofile in dir, with their share of the
 * non-idle samples. `about` lines (what was run, its figures) go into the header.
 */
export function topSelfTime(dir: string, n: number, about: string[]): string {
  const file = newestProfile(dir);
  if (!file) return `no .cpuprofile written in ${dir}\n`;
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const frame = nodes.get(id)!.callFrame;
    const where = frame.url
      ? ` ${frame.url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${frame.lineNumber + 1}`
      : '';
    const key = `${frame.functionName || '(anonymous)'}${where}`;
    const dt = profile.timeDeltas[i] ?? 0;
    self.set(key, (self.get(key) ?? 0) + dt);
    total += dt;
  });
  const busy = total - (self.get('(idle)') ?? 0);
  const rows = [...self]
    .filter(([k]) => k !== '(idle)')
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(
      ([k, t]) =>
        `${(t / 1000).toFixed(0).padStart(6)} ms ${((100 * t) / busy).toFixed(1).padStart(5)} %  ${k}`,
    );
  return [
    `# node --cpu-prof of \`feedsync run\`: top ${n} self-time functions (share of non-idle samples)`,
    ...about.map((line) => `# ${line}`),
    '# The profiler samples wall time: a function blocked in a system call (socket write, fsync)',
    '# is charged while it waits, so the CPU figures are the measure; this is the where.',
    ...rows,
    `# non-idle total ${(busy / 1000).toFixed(0)} ms`,
    '',
  ].join('\n');
}

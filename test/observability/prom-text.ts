// A small reader for the Prometheus text format, enough to assert exact sample values.
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseSamples(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`unparseable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, '$1');
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The value of the one sample with this name and exactly these labels; throws when absent. */
export function sampleValue(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const wanted = JSON.stringify(Object.entries(labels).sort());
  const found = samples.filter(
    (s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === wanted,
  );
  if (found.length !== 1) {
    throw new Error(`expected one sample ${name}${JSON.stringify(labels)}, found ${found.length}`);
  }
  return found[0]!.value;
}

/** Metric family names declared by `# TYPE` lines. */
export function metricFamilies(text: string): Map<string, string> {
  const families = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) families.set(m[1]!, m[2]!);
  return families;
}

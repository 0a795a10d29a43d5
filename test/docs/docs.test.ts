// The documentation checks (`npm test`): the configuration and command-line references are
// generated from the code and must match what is committed (`npx vitest run test/docs -u`
// regenerates them), every relative link resolves, and the docs speak of the product only.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliPath } from '../support/process.js';
import { loadKeyDocs, renderConfigReference, schemaKeys } from './config-reference.js';

const root = resolve(import.meta.dirname, '../..');
const keyDocsFile = join(root, 'docs/reference/config-keys.yaml');

function markdownFiles(): string[] {
  const files = [join(root, 'README.md'), join(root, 'helm/feedsync/README.md')];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.md')) files.push(path);
    }
  };
  walk(join(root, 'docs'));
  return files.filter((f) => existsSync(f));
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    if (fenced) continue;
    const m = /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .trim()
      .toLowerCase()
      .replace(/<[^>]*>/g, '')
      .replace(/[^\p{L}\p{N}\- _]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of markdown.matchAll(/<a (?:name|id)="([^"]+)"/g)) out.add(m[1]!);
  return out;
}

function links(markdown: string): string[] {
  const withoutCode = markdown.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  return [...withoutCode.matchAll(/\]\(([^)\s]+)(?: "[^"]*")?\)/g)].map((m) => m[1]!);
}

describe('configuration reference', () => {
  const keys = schemaKeys();
  const docs = loadKeyDocs(keyDocsFile);

  it('describes every key the schema accepts, and no other', () => {
    const inSchema = keys.map((k) => k.path);
    expect(
      inSchema.filter((p) => !docs.has(p)),
      'schema keys missing from config-keys.yaml',
    ).toEqual([]);
    expect(
      [...docs.keys()].filter((p) => !inSchema.includes(p)),
      'config-keys.yaml keys the schema lacks',
    ).toEqual([]);
  });

  it('docs/reference/configuration.md is the one generated from the schema', async () => {
    await expect(renderConfigReference(keys, docs)).toMatchFileSnapshot(
      join(root, 'docs/reference/configuration.md'),
    );
  });
});

describe('command-line reference', () => {
  const help = (args: string[]) =>
    execFileSync(process.execPath, [cliPath, ...args, '--help'], {
      encoding: 'utf8',
      env: { ...process.env, COLUMNS: '100', FEEDSYNC_CONFIG: '' },
    });

  it("docs/reference/cli.md holds every command's --help as the built CLI prints it", async () => {
    const top = help([]);
    const commands = [...top.split('Commands:')[1]!.matchAll(/^ {2}([a-z-]+)/gm)]
      .map((m) => m[1]!)
      .filter((c) => c !== 'help');
    expect(commands.length).toBeGreaterThan(5);
    const sections = [
      '# Command-line reference',
      '',
      '<!-- Generated from `feedsync <command> --help` by test/docs/docs.test.ts;',
      '     run `npm run build && npx vitest run test/docs -u` after changing a command. -->',
      '',
      'How to use them day to day: [operating](../operating.md).',
      '',
      '## `feedsync`',
      '',
      '```text',
      top.trimEnd(),
      '```',
    ];
    for (const command of commands) {
      const text = help([command]);
      sections.push('', `## \`feedsync ${command}\``, '', '```text', text.trimEnd(), '```');
      const sub = text.split('Commands:')[1];
      if (!sub) continue;
      for (const m of sub.matchAll(/^ {2}([a-z-]+)/gm)) {
        if (m[1] === 'help') continue;
        sections.push(
          '',
          `### \`feedsync ${command} ${m[1]}\``,
          '',
          '```text',
          help([command, m[1]!]).trimEnd(),
          '```',
        );
      }
    }
    await expect(`${sections.join('\n')}\n`).toMatchFileSnapshot(join(root, 'docs/reference/cli.md'));
  });
});

describe('documentation', () => {
  const files = markdownFiles();

  it('every relative link resolves, anchors included', () => {
    const broken: string[] = [];
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      for (const link of links(text)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue;
        const [pathPart, anchor] = link.split('#', 2) as [string, string | undefined];
        const target = pathPart === '' ? file : resolve(dirname(file), decodeURIComponent(pathPart));
        const where = `${relative(root, file)} → ${link}`;
        if (!existsSync(target)) {
          broken.push(`${where} (no such file)`);
          continue;
        }
        if (anchor && target.endsWith('.md') && !anchors(readFileSync(target, 'utf8')).has(anchor)) {
          broken.push(`${where} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('speaks of the product, not of how it was made', () => {
    const narration =
      /\b(this|last|previous|next|earlier|that) session\b|\bsessions?'s?\b|\bround (one|two|three|\d)\b|\b(first|second|third) (round|pass)\b|\blast time\b|\bthis time\b/i;
    const found = files.flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .map((line, i) => ({ line, at: `${relative(root, file)}:${i + 1}` }))
        .filter(({ line }) => narration.test(line))
        .map(({ line, at }) => `${at}: ${line.trim().slice(0, 120)}`),
    );
    expect(found).toEqual([]);
  });

  it('the README stays a front page', () => {
    expect(readFileSync(join(root, 'README.md'), 'utf8').split('\n').length).toBeLessThanOrEqual(260);
  });
});

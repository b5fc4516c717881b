// Every citation points at something that exists: a comment or a doc citing `docs/X.md` (and
// a section of it), a markdown link, a repository path in backticks. The design notes the code
// once cited from outside the repository are cited by their docs/ pages instead.
import t from 'tap';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { docFiles } from '../helpers.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(root, dir))) {
    const rel = `${dir}/${name}`;
    if (statSync(join(root, rel)).isDirectory()) out.push(...sources(rel));
    else if (/\.(ts|cc|h|sh)$/.test(name) && !name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

/** A markdown file's headings, as written and as GitHub anchors. */
function headings(file: string): { titles: Set<string>; anchors: Set<string> } {
  const titles = new Set<string>();
  const anchors = new Set<string>();
  for (const m of readFileSync(join(root, file), 'utf8').matchAll(/^#{1,6} (.+)$/gm)) {
    const title = m[1]!.trim();
    titles.add(title);
    anchors.add(
      title
        .toLowerCase()
        .replace(/[^\p{L}\p{N} _-]/gu, '')
        .replace(/ /g, '-'),
    );
  }
  return { titles, anchors };
}

/** What `text` (of `file`) cites that does not exist. */
export function dangling(file: string, text: string, exists: (path: string) => boolean = (p) => existsSync(join(root, p))): string[] {
  const bad: string[] = [];
  // Comments wrap: a citation may continue on the next comment line.
  const flat = text.replace(/\n\s*(?:\*|\/\/|#)\s*/g, ' ');
  for (const name of ['MODEL', 'LAYOUT', 'DESIGN']) {
    if (new RegExp(`(?<![\\w/])${name}\\.md`).test(flat)) bad.push(`${file}: cites ${name}.md, which is not in the repository`);
  }
  if (flat.includes('../shared/')) bad.push(`${file}: cites ../shared/, which is not in the repository`);
  for (const m of flat.matchAll(/docs\/([\w-]+\.md)(?:, ([A-Z][\w ]*[\w]))?/g)) {
    const doc = `docs/${m[1]}`;
    if (!exists(doc)) {
      bad.push(`${file}: cites ${doc}`);
      continue;
    }
    if (m[2] !== undefined && !headings(doc).titles.has(m[2])) bad.push(`${file}: cites section '${m[2]}' of ${doc}`);
  }
  if (file.endsWith('.md')) {
    const dir = file.includes('/') ? file.slice(0, file.lastIndexOf('/') + 1) : '';
    for (const m of text.matchAll(/\]\(([^)#\s]*)(?:#([\w-]+))?\)/g)) {
      if (/^[a-z]+:/.test(m[1]!)) continue; // a URL
      const target = m[1] === '' ? file : join(dir, m[1]!).replace(/\\/g, '/');
      if (!exists(target)) bad.push(`${file}: links to ${m[1]}`);
      else if (m[2] !== undefined && target.endsWith('.md') && !headings(target).anchors.has(m[2])) bad.push(`${file}: links to #${m[2]} of ${target}`);
    }
    for (const m of text.matchAll(/`((?:src|test|bench|native|workers|docs)\/[\w./-]+\.(?:ts|cc|h|md|sh|json))`/g)) {
      if (!exists(m[1]!)) bad.push(`${file}: names ${m[1]}`);
    }
  }
  return bad;
}

t.test('the checker finds a planted dangling reference (negative control)', async (t) => {
  const none = (): boolean => false;
  t.same(dangling('x.ts', '// see docs/nothing.md', none), ['x.ts: cites docs/nothing.md']);
  t.match(dangling('x.ts', `// the rules (${'MODEL'}.md, Encoder)`).join(), /cites MODEL\.md/);
  t.same(dangling('x.ts', '/* (docs/model.md, No Such Section) */'), ["x.ts: cites section 'No Such Section' of docs/model.md"]);
  t.same(dangling('docs/x.md', 'see [the API](missing.md) and `src/runtime/gone.ts`'), [
    'docs/x.md: links to missing.md',
    'docs/x.md: names src/runtime/gone.ts',
  ]);
  t.same(dangling('docs/x.md', 'see [the model](model.md#no-such-heading)'), ['docs/x.md: links to #no-such-heading of docs/model.md']);
  t.same(dangling('x.ts', '/* (docs/model.md,\n * Prompt and generation) */'), [], 'a citation continued on the next comment line is read whole');
});

t.test('every citation in the sources and the docs points at something that exists', async (t) => {
  const files = [...['src', 'test', 'bench', 'native/src', 'workers'].flatMap(sources), ...docFiles()];
  t.ok(files.length > 150, `${files.length} files read`);
  const bad = files.flatMap((f) => (f === 'test/shape/docs.test.ts' ? [] : dangling(f, readFileSync(join(root, f), 'utf8'))));
  t.same(bad, [], 'no dangling reference');
});

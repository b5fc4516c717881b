// The import graph of src/ and workers/ points down the layers docs/architecture.md names and has no cycle.
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** Lower layers first; a file may import its own layer or one below. */
const LAYERS: [string, number][] = [
  ['src/errors.ts', 0],
  ['src/options.ts', 0],
  ['src/bytes.ts', 0],
  ['src/threads.ts', 0],
  ['src/native.ts', 1],
  ['src/memory/', 2],
  ['src/dsp/', 3],
  ['src/model/', 4],
  ['src/io/', 5],
  ['src/duplex/', 6],
  ['src/core/', 7],
  ['src/runtime/', 8],
  ['src/api/', 9],
  ['src/daemon/', 9],
  ['src/cli/', 10],
  ['src/index.ts', 10],
  ['src/devices.ts', 10],
  ['src/reference.ts', 10],
  ['workers/', 11],
];

function layerOf(file: string): number {
  const hit = LAYERS.find(([prefix]) => file === prefix || (prefix.endsWith('/') && file.startsWith(prefix)));
  if (hit === undefined) throw new Error(`${file} is in no layer: add it to LAYERS`);
  return hit[1];
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(root, dir))) {
    const rel = `${dir}/${name}`;
    if (statSync(join(root, rel)).isDirectory()) out.push(...sources(rel));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

/** Relative imports of a TypeScript file, type-only ones included (they are dependencies too). */
function importsOf(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const specs = [
    ...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"`;]*?(?:from\s*)?['"](\.{1,2}\/[^'"]+)['"]/g),
    ...text.matchAll(/import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g),
  ].map((m) => m[1] as string);
  return specs.map((s) => relative(root, resolve(root, dirname(file), s)).replace(/\.js$/, '.ts'));
}

const files = [...sources('src'), ...sources('workers')];
const graph = new Map(files.map((f) => [f, importsOf(f)]));

t.test('the parser sees imports (a negative control: a known edge is found)', async (t) => {
  t.ok(graph.get('src/memory/domain.ts')?.includes('src/memory/ledger.ts'));
  t.ok(graph.get('src/runtime/stages/stage.ts')?.includes('src/memory/arena.ts'), 'type-only imports count');
  t.ok(files.length > 50);
});

t.test('every import points to an existing file in the same or a lower layer', async (t) => {
  const upward: string[] = [];
  for (const [file, deps] of graph) {
    for (const dep of deps) {
      t.ok(graph.has(dep) || dep.startsWith('native/'), `${file} → ${dep} exists`);
      if (graph.has(dep) && layerOf(dep) > layerOf(file)) upward.push(`${file} → ${dep}`);
    }
  }
  t.same(upward, [], 'no upward import');
});

t.test('no import cycle', async (t) => {
  // Tarjan's strongly connected components; any component of two or more files is a cycle.
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const comp: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(comp.sort());
    }
  };
  for (const f of files) if (!index.has(f)) visit(f);
  t.same(cycles, [], 'no cycle');
});

t.test('memory knows nothing of audio; model, dsp, duplex and core open no file and start no thread', async (t) => {
  for (const f of files.filter((f) => f.startsWith('src/memory/'))) {
    t.notMatch(readFileSync(join(root, f), 'utf8'), /'(workspace\.|capture|playback)/, `${f} names no audio category`);
  }
  for (const f of files.filter((f) => /^src\/(model|dsp|memory|duplex|core)\//.test(f))) {
    t.notMatch(readFileSync(join(root, f), 'utf8'), /new Worker\b|import { Worker|node:fs'/, `${f} opens no file and starts no thread`);
  }
});

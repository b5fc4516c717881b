// The API reference in docs/api/ is generated from the declarations (TypeDoc, typedoc.json) and
// committed: regenerated here, it must be the same bytes, or the types changed without it.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync, cpSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratchDir } from '../helpers.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** Files of `a` and `b` (folders) that differ, or are in one only. */
function drift(a: string, b: string): string[] {
  const names = new Set([...readdirSync(a), ...readdirSync(b)]);
  const out: string[] = [];
  for (const n of [...names].sort()) {
    let x: Buffer | null = null;
    let y: Buffer | null = null;
    try {
      x = readFileSync(join(a, n));
    } catch {}
    try {
      y = readFileSync(join(b, n));
    } catch {}
    if (x === null || y === null || !x.equals(y)) out.push(n);
  }
  return out;
}

t.test('docs/api is what TypeDoc makes of the declarations now', (t) => {
  const out = scratchDir('voxslab-apiref-');
  const r = spawnSync(process.execPath, [join(root, 'node_modules/typedoc/bin/typedoc'), '--out', out], { cwd: root, encoding: 'utf8', timeout: 120_000 });
  t.equal(r.status, 0, `typedoc ran without a warning (${r.stderr.trim()}${r.stdout.includes('warning') ? r.stdout : ''})`);
  const committed = join(root, 'docs/api');
  t.same(drift(committed, out), [], 'no file differs: after changing a public type, run npm run docs:api');
  // Control: one changed byte is found.
  const planted = scratchDir('voxslab-apiref-planted-');
  cpSync(committed, planted, { recursive: true });
  const file = join(planted, 'index.md');
  writeFileSync(file, readFileSync(file, 'utf8').replace('One conversation on an Engine.', 'One conversation on an engine.'));
  t.same(drift(planted, out), ['index.md'], 'a planted change is reported');
  t.end();
});

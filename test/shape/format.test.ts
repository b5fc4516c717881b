import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Biome formats and lints the TypeScript (`npm run lint`, part of `npm test`); the native
// sources it does not read are held to the same line limit here.
const LIMIT = 160;
const native = fileURLToPath(new URL('../../../native/src/', import.meta.url));

function longLines(text: string, limit = LIMIT): number[] {
  const out: number[] = [];
  text.split('\n').forEach((line, i) => {
    if ([...line].length > limit) out.push(i + 1);
  });
  return out;
}

t.test(`native sources keep to ${LIMIT} characters a line`, async (t) => {
  t.same(longLines(`${'x'.repeat(LIMIT)}\n${'y'.repeat(LIMIT + 1)}\n`), [2], 'negative control: a line one past the limit is found');
  const files = readdirSync(native).filter((f) => /\.(cc|h)$/.test(f));
  t.ok(files.length >= 10, `${files.length} native files`);
  for (const f of files) t.same(longLines(readFileSync(native + f, 'utf8')), [], f, { diagnostic: false });
});

// Every error thrown in src/ comes from the one catalogue (src/errors.ts), with a code.
const BARE = /new (Error|RangeError|TypeError)\(/;
t.test('src/ throws no bare Error, RangeError or TypeError', async (t) => {
  t.ok(BARE.test('throw new RangeError(`x`)'), 'negative control: a bare RangeError is found');
  const src = fileURLToPath(new URL('../../../src/', import.meta.url));
  const files = (readdirSync(src, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'));
  t.ok(files.length > 50, `${files.length} source files`);
  const found = files.flatMap((f) =>
    readFileSync(join(src, f), 'utf8')
      .split('\n')
      .flatMap((line, i) => (BARE.test(line) ? [`${f}:${i + 1}`] : [])),
  );
  t.same(found, [], 'none');
});

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

// Rooms stay small enough to read: a file past its limit is split by what it does. Generated or
// table files would be named here with the reason; there are none.
const FILE_LIMITS: [string, RegExp, number][] = [
  ['src/', /\.ts$/, 600],
  ['native/src/', /\.(cc|h)$/, 700],
];
const ALLOWED_LONG: Record<string, string> = {};
t.test('no file under src/ is over 600 lines, none under native/src/ over 700', async (t) => {
  const root = fileURLToPath(new URL('../../../', import.meta.url));
  const over = (text: string, limit: number): boolean => text.split('\n').length - (text.endsWith('\n') ? 1 : 0) > limit;
  t.ok(over(`${'x\n'.repeat(601)}`, 600) && !over(`${'x\n'.repeat(600)}`, 600), 'negative control: 601 lines are over, 600 are not');
  for (const [dir, ext, limit] of FILE_LIMITS) {
    const files = (readdirSync(join(root, dir), { recursive: true }) as string[]).filter((f) => ext.test(f));
    t.ok(files.length > 10, `${files.length} files under ${dir}`);
    const long = files.filter((f) => ALLOWED_LONG[dir + f] === undefined && over(readFileSync(join(root, dir, f), 'utf8'), limit));
    t.same(long, [], `${dir}: none over ${limit} lines`);
  }
});

import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BASELINES, computeBaseline } from './baselines.js';

const dir = fileURLToPath(new URL('../../../test/manifests/', import.meta.url));

/** Every path where two JSON values differ, as readable lines. */
function diff(a: unknown, b: unknown, path = '$'): string[] {
  if (Object.is(a, b)) return [];
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object' || Array.isArray(a) !== Array.isArray(b)) {
    return [`${path}: baseline ${JSON.stringify(a)} → now ${JSON.stringify(b)}`];
  }
  const out: string[] = [];
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) out.push(...diff((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${path}.${k}`));
  return out;
}

for (const name of Object.keys(BASELINES)) {
  t.test(`manifest baseline ${name}`, async (t) => {
    const frozen = JSON.parse(readFileSync(`${dir}${name}.json`, 'utf8')) as unknown;
    const now = computeBaseline(name);
    const changes = diff(frozen, JSON.parse(JSON.stringify(now)));
    t.same(changes, [], changes.length === 0 ? 'unchanged' : `changed (run npm run manifests:update if intended):\n${changes.join('\n')}`);
    const m = now;
    t.equal(m.allocations.afterReadiness.attempts, 0);
    const sum = Object.values(m.owners).reduce((a, o) => a + o.held, 0);
    t.equal(sum, m.totals.current, 'owners sum to the total');
  });
}

// Rewrites the frozen baselines in test/manifests/ from the current code.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BASELINES, computeBaseline } from './baselines.js';

const dir = fileURLToPath(new URL('../../../test/manifests/', import.meta.url));
for (const name of Object.keys(BASELINES)) {
  writeFileSync(`${dir}${name}.json`, `${JSON.stringify(computeBaseline(name), null, 2)}\n`);
  process.stdout.write(`wrote test/manifests/${name}.json\n`);
}

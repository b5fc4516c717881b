import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { native } from '../../src/native.js';

// Every dispatch path this CPU supports runs the kernel and convolution tests in its own
// process (the path is chosen once, when the addon loads).
const files = ['./kernels.test.js', './conv.test.js'].map((f) => fileURLToPath(new URL(f, import.meta.url)));
const best = native.kernelIsa();
const paths = ['scalar', ...(best === 'avx2+fma' || best.startsWith('avx512f') ? ['avx2'] : [])];

for (const isa of paths) {
  t.test(`kernels under VOXSLAB_KERNELS=${isa}`, async (t) => {
    for (const file of files) {
      const r = spawnSync(process.execPath, [file], { encoding: 'utf8', env: { ...process.env, VOXSLAB_KERNELS: isa, TAP: '1' }, timeout: 300_000 });
      const failed = (r.stdout.match(/^\s*not ok /gm) ?? []).length;
      t.equal(r.status, 0, `${file.split('/').pop()} exits 0`);
      t.equal(failed, 0, `${file.split('/').pop()}: no failed assertion`);
      if (file.endsWith('kernels.test.js')) t.match(r.stdout, new RegExp(`GEMV for every weight encoding matches a float64 reference \\(${isa === 'avx2' ? 'avx2\\+fma' : 'scalar'}\\)`), 'ran on the forced path');
    }
  });
}

import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { KERNEL_LEVELS, native } from '../../src/native.js';

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
      if (file.endsWith('kernels.test.js'))
        t.match(
          r.stdout,
          new RegExp(`GEMV for every weight encoding matches a float64 reference \\(${isa === 'avx2' ? 'avx2\\+fma' : 'scalar'}\\)`),
          'ran on the forced path',
        );
    }
  });
}

t.test('one instruction-set choice: every kernel family follows VOXSLAB_KERNELS, and a value that names none is refused', async (t) => {
  const levels = `(${KERNEL_LEVELS.slice(0, -1).join(', ')} or ${KERNEL_LEVELS.at(-1)})`;
  if (process.arch === 'x64') t.equal(levels, '(scalar, avx2 or avx512)', "x86-64's levels");
  const probe =
    "import('./dist/src/native.js').then(({ native }) => console.log(JSON.stringify([native.kernelIsa(), native.kernelPath()])), (e) => { " +
    'console.log(JSON.stringify([e.name, e.message])); })';
  const run = (value: string) => {
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8', env: { ...process.env, VOXSLAB_KERNELS: value } });
    return JSON.parse(r.stdout) as [string, string];
  };
  t.same(run('scalar'), ['scalar', 'scalar'], 'scalar: GEMV/GEMM and the DSP dot product both scalar');
  if (paths.includes('avx2')) t.same(run('avx2'), ['avx2+fma', 'avx2+fma'], 'avx2: both on AVX2');
  // The other architecture's level names are refused too: they name nothing this CPU runs.
  for (const bad of ['sse', 'AVX2', 'avx512f+vnni', process.arch === 'arm64' ? 'avx2' : 'neon']) {
    const [name, message] = run(bad);
    t.equal(name, 'BadInputError', `${bad}: refused when the addon loads`);
    t.equal(message, `field VOXSLAB_KERNELS: '${bad}' names no instruction set ${levels}`);
  }
  // Through the command: one line and the bad-input exit code, not an uncaught trace.
  const cli = spawnSync(process.execPath, ['dist/src/cli/main.js', 'plan', '--config', 'tiny'], {
    encoding: 'utf8',
    env: { ...process.env, VOXSLAB_KERNELS: 'bogus' },
  });
  t.equal(cli.status, 4, 'voxslab exits 4');
  t.equal(cli.stderr, `voxslab: field VOXSLAB_KERNELS: 'bogus' names no instruction set ${levels}\n`, 'one line naming the variable');
});

t.test("the integer peak probe times the integer GEMM's own instruction on each path", async (t) => {
  const probe =
    "import('./dist/src/native.js').then(({ native }) => console.log(JSON.stringify([native.kernelIsa(), native.int8Macs(), native.int8Probe(1000)])))";
  const run = (value: string | undefined) => {
    const env = { ...process.env };
    if (value === undefined) delete env.VOXSLAB_KERNELS;
    else env.VOXSLAB_KERNELS = value;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8', env });
    return JSON.parse(r.stdout) as [string, number, number];
  };
  t.same(run('scalar').slice(0, 2), ['scalar', 0], 'scalar: no integer probe (the bench reports null)');
  if (paths.includes('avx2')) {
    const [isa, macs, value] = run('avx2');
    t.same([isa, macs], ['avx2+fma', 32], 'AVX2: vpmaddubsw, 32 multiply-adds');
    t.ok(Number.isFinite(value), 'and the probe ran');
  }
  if (best === 'avx512f+vnni') t.equal(run(undefined)[1], 64, 'VNNI: vpdpbusd on 512 bits, 64 multiply-adds');
  else if (best === 'avx512f') t.equal(run(undefined)[1], 32, 'AVX-512 without VNNI: the integer GEMM is the AVX2 one');
});

t.test('the prefill kernel gives the same bits with VNNI and on AVX2 (the integer GEMM on both)', async (t) => {
  const probe = fileURLToPath(new URL('./workers/prefill-probe.js', import.meta.url));
  const run = (value: string | undefined) => {
    const env = { ...process.env };
    if (value === undefined) delete env.VOXSLAB_KERNELS;
    else env.VOXSLAB_KERNELS = value;
    const r = spawnSync(process.execPath, [probe], { encoding: 'utf8', env });
    t.equal(r.status, 0, `probe under ${value ?? 'the default'} exits 0`);
    return JSON.parse(r.stdout) as [string, string];
  };
  const [isa, bits] = run(undefined);
  if (isa !== 'avx512f+vnni') {
    t.ok(paths.includes('avx2') ? run('avx2')[1] === bits : true, `${isa}: the probe is deterministic on this path`);
    return;
  }
  const [avx2, avx2Bits] = run('avx2');
  t.equal(avx2, 'avx2+fma');
  t.equal(avx2Bits, bits, 'VNNI and AVX2 outputs: the same digest');
});

t.test("the ISTFT's spectrum (the addon's exp and sine) has the same bits on every path", async (t) => {
  // Ordinary bins, and edges that send a vector pass to the one-at-a-time form.
  const probe =
    "import('./dist/src/native.js').then(({ native }) => { const b = 4099, v = new Float32Array(2 * b); let s = 5;" +
    ' for (let i = 0; i < 2 * b; i++) { s = (s * 1103515245 + 12345) % 2147483648; v[i] = (s / 2147483648 - 0.5) * (i < b ? 30 : 100); }' +
    ' v[17] = 709; v[40] = -744; v[b + 90] = 3e6; v[b + 91] = NaN; const out = new Float64Array(2 * b); native.polarSpectrum(v, 0, b, out);' +
    " console.log(JSON.stringify([native.kernelIsa(), require('node:crypto').createHash('sha256').update(new Uint8Array(out.buffer)).digest('hex')])); })";
  const run = (value: string) => {
    const r = spawnSync(process.execPath, ['--input-type=commonjs', '-e', probe], { encoding: 'utf8', env: { ...process.env, VOXSLAB_KERNELS: value } });
    t.equal(r.status, 0, `probe under ${value} exits 0`);
    return JSON.parse(r.stdout) as [string, string];
  };
  const digests = [...paths, ...(best.startsWith('avx512f') ? ['avx512'] : [])].map((p) => [p, ...run(p)] as const);
  for (const [path, isa, digest] of digests) t.equal(digest, digests[0]![2], `${path} (${isa}): the scalar path's digest`);
});

t.test("the facade's scratch sizes are the addon's: gemvInt takes exactly gemvScratchFloats(K) floats", async (t) => {
  const { gemvScratchFloats, attentionScratchFloats, GEMM_PACK_FLOATS } = await import('../../src/model/blocks/kernels.js');
  for (const K of [64, 512, 2048, 8192]) {
    const M = 4;
    const w = new Uint8Array(M * K);
    const sc = new Uint16Array((M * K) / 32).fill(0x3c00); // f16 1.0
    const x = new Float32Array(K).fill(0.5);
    const y = new Float32Array(M);
    const need = gemvScratchFloats(K);
    native.gemvInt(3, w, sc, sc, 32, x, y, M, K, new Float32Array(need));
    t.throws(() => native.gemvInt(3, w, sc, sc, 32, x, y, M, K, new Float32Array(need - 1)), /scratch has/, `K=${K}: one float less is refused`);
  }
  t.equal(GEMM_PACK_FLOATS, native.gemmPackFloats);
  t.equal(attentionScratchFloats(64, 64, 64, 32, 8), native.attentionScratchFloats(64, 64, 64, 4, 8));
});

import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { apmAvailable } from '../../src/dsp/aec.js';
import { native } from '../../src/native.js';
import { resampleSignal } from '../../src/dsp/resample.js';
import { corpusTools, utterance } from '../../bench/corpus.js';
import type { DeviceProbe } from '../../bench/devices.js';
import { scratchDir } from '../helpers.js';
import { spawnServe } from '../../src/daemon/child.js';
import { setTimeout as delay } from 'node:timers/promises';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const RATE = 48000;

/** Virtual ALSA devices: a microphone that reads `input` (float32 mono at 48 kHz) and a speaker that writes a file. */
function virtualDevices(input: Float32Array): { env: NodeJS.ProcessEnv; out: string } {
  const dir = scratchDir('voxslab-alsa-');
  const infile = join(dir, 'mic.raw');
  const out = join(dir, 'speaker.raw');
  writeFileSync(infile, Buffer.from(input.buffer, input.byteOffset, input.byteLength));
  const conf = join(dir, 'voxslab.conf');
  writeFileSync(
    conf,
    `pcm.voxmic {\n  type file\n  slave.pcm "null"\n  file "/dev/null"\n  infile "${infile}"\n  format "raw"\n  hint { show on description ` +
      `"voxslab virtual microphone" }\n}\n` +
      `pcm.voxspk {\n  type file\n  slave.pcm "null"\n  file "${out}"\n  format "raw"\n  hint { show on description "voxslab virtual speaker" }\n}\n`,
  );
  // The CLI runs as a user runs it: without the test runner's module hooks (NODE_OPTIONS).
  const env: NodeJS.ProcessEnv = { ...process.env, ALSA_CONFIG_PATH: `/usr/share/alsa/alsa.conf:${conf}` };
  delete env.NODE_OPTIONS;
  return { env, out };
}

const voxslab = (env: NodeJS.ProcessEnv, ...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000, env });

/**
 * Three seconds of silence, the question, sixteen seconds of silence. The virtual devices have
 * no clock (they run as fast as the pipeline takes them), so the margins are in device time:
 * the pipeline's start before the question, and the reply's compute after it.
 */
function speech48k(): Float32Array {
  const u = utterance('What is the weather going to be like in Paris tomorrow morning?', 'en-us', 165);
  const q = resampleSignal(u, 16000, RATE);
  const x = new Float32Array(3 * RATE + q.length + 16 * RATE);
  x.set(q, 3 * RATE);
  return x;
}

const skip = apmAvailable() && corpusTools() ? false : 'needs WebRTC audio processing, espeak-ng and sox';

t.test('voxslab devices lists the virtual ALSA devices', async (t) => {
  const { env } = virtualDevices(new Float32Array(RATE));
  const r = voxslab(env, 'devices', '--json');
  t.equal(r.status, 0, `exit 0 (${r.stderr.slice(-300)})`);
  const doc = JSON.parse(r.stdout) as { devices: { id: number; name: string; inputs: number; outputs: number; defaultRate: number; hostApi: string }[] };
  const names = doc.devices.map((d) => d.name);
  t.ok(names.includes('voxmic') && names.includes('voxspk'), `listed: ${names.join(', ')}`);
  const mic = doc.devices.find((d) => d.name === 'voxmic')!;
  t.ok(mic.inputs > 0 && mic.outputs > 0 && mic.defaultRate > 0 && mic.hostApi === 'ALSA', 'with channels, default rate and host API');
  const table = voxslab(env, 'devices');
  t.match(table.stdout, /voxmic/, 'and as a table');
  t.notMatch(`${r.stderr}${table.stderr}`, /jack|ALSA lib/i, 'with no screen from JACK or alsa-lib about sound servers and cards the machine lacks');
});

t.test("loading the device library leaves the host's signal handlers as they were", async (t) => {
  const { env } = virtualDevices(new Float32Array(RATE));
  const dist = new URL('../../src/', import.meta.url).href;
  // Each mode in a process of its own: a module loads once per process.
  const probe = (mode: 'voxslab' | 'direct') => {
    const src = `
      import { constants } from 'node:os';
      import { createRequire } from 'node:module';
      const { native } = await import('${dist}native.js');
      const { listDevices } = await import('${dist}io/devices.js');
      const signals = ['SIGSEGV', 'SIGBUS', 'SIGILL', 'SIGFPE', 'SIGABRT'];
      const handlers = () => signals.map((s) => native.signalHandler(constants.signals[s]));
      const before = handlers();
      const require = createRequire('${dist}io/devices.js'); // resolves as the package does
      if ('${mode}' === 'voxslab') listDevices(); else require('naudiodon');
      const after = handlers();
      const path = createRequire(require.resolve('naudiodon')).resolve('segfault-handler');
      const cached = require.cache[path] === undefined ? 'absent' : typeof require.cache[path].exports.registerHandler;
      const real = typeof require('segfault-handler').registerHandler;
      console.log(JSON.stringify({ before, after, cached, real }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', src], { encoding: 'utf8', env, cwd: scratchDir('voxslab-signals-'), timeout: 60_000 });
    t.equal(r.status, 0, `${mode}: exit 0 (${r.stderr.slice(-300)})`);
    return JSON.parse(r.stdout) as { before: number[]; after: number[]; cached: string; real: string };
  };
  const ours = probe('voxslab');
  t.ok(
    ours.before.every((h) => h >= 0),
    `the handlers are readable: ${ours.before.join(', ')}`,
  );
  t.same(ours.after, ours.before, 'listDevices: SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT keep their handlers');
  t.equal(ours.cached, 'absent', 'the stand-in is gone from the module cache');
  t.equal(ours.real, 'function', "and the app's own require gets the real segfault-handler");
  // The control: naudiodon required as it is changes them.
  const direct = probe('direct');
  t.notSame(direct.after, direct.before, `requiring naudiodon directly installs its handler (${direct.before.join(', ')} → ${direct.after.join(', ')})`);
});

t.test('voxslab talk: a duplex session end to end through PortAudio on virtual devices', { skip }, async (t) => {
  const { env, out } = virtualDevices(speech48k());
  const r = voxslab(env, 'talk', '--input-device', 'voxmic', '--output-device', 'voxspk', '--rate', String(RATE), '--seconds', '20');
  t.equal(r.status, 0, `exit 0 (${r.stderr.slice(-300)})`);
  t.match(r.stderr, /talk: voxmic → voxspk at 48000 Hz/, 'the devices it opened');
  t.match(
    r.stderr,
    /talk: 20 s, 1 turns/,
    `the spoken question made a turn: ${r.stderr
      .split('\n')
      .filter((l) => l.startsWith('talk: 20'))
      .join('')}`,
  );
  const library = native.audioAvailable() ? 'portaudio' : 'naudiodon';
  t.match(r.stderr, new RegExp(`device library \\(${library}\\): \\d+ buffers, \\d+ bytes`), `on ${library}, its buffers counted`);
  t.match(r.stdout, /you: \(speaking\).*done\n.*assistant: /s, 'the transcript shows the turn and the reply');
  const played = new Float32Array(readFileSync(out).buffer.slice(0));
  let loud = 0;
  for (const v of played) if (Math.abs(v) > 1e-3) loud++;
  t.ok(loud > RATE / 10, `the reply reached the speaker (${loud} audible samples of ${played.length})`);
});

const noPortAudio = native.audioAvailable() ? false : 'the addon was built without PortAudio';

/** The bench's device probe (a child process) on the virtual devices, with VOXSLAB_AUDIO=`library`. */
function deviceProbe(library: string, periods: number): { status: number | null; stderr: string; result: DeviceProbe | null } {
  const { env } = virtualDevices(new Float32Array(RATE * Math.ceil(periods / 100 + 2)));
  const probe = fileURLToPath(new URL('../../bench/workers/device-probe.js', import.meta.url));
  const r = spawnSync(process.execPath, ['--max-semi-space-size=64', probe, String(periods)], {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...env, VOXSLAB_AUDIO: library },
  });
  const line = r.stdout.split('\n').find((l) => l.startsWith('{'));
  return { status: r.status, stderr: r.stderr, result: line === undefined ? null : (JSON.parse(line) as DeviceProbe) };
}

// The addon's device: PortAudio's callback fills the microphone ring and plays the output ring;
// the JS side only takes whole periods. naudiodon, the control, hands out a Buffer per chunk.
t.test("the addon's PortAudio device: periods at the device's pace with no Buffer, ArrayBuffer or heap growth", { skip: noPortAudio }, async (t) => {
  const ours = deviceProbe('portaudio', 400);
  t.equal(ours.status, 0, `the probe ran (${ours.stderr.trim().split('\n').at(-1) ?? ''})`);
  const p = ours.result!;
  t.equal(p.library, 'portaudio', 'on the addon');
  t.equal(p.libraryBuffers, 0, 'no library Buffers');
  t.ok(p.arrayBufferGrowth <= 0, `no ArrayBuffer growth over ${p.window} periods (${p.arrayBufferGrowth} bytes)`);
  // What is left is the wake-up itself (Node's thread-safe call into JS, young garbage); a
  // Buffer per chunk, as naudiodon hands out, is several times that.
  t.ok(p.heapGrowth / p.window < 256, `the JS heap grew ${(p.heapGrowth / p.window).toFixed(0)} bytes a period over ${p.window} periods (under 256)`);
  const sorted = [...p.intervals].sort((a, b) => a - b);
  const median = sorted[sorted.length >> 1]!;
  t.ok(Math.abs(median - p.periodMs) < 1, `a device without a clock held to real time: the median period took ${median.toFixed(2)} ms of ${p.periodMs}`);
  t.ok(p.wakeMs.length > 0 && p.wakeMs.every((ms) => ms >= 0 && ms < 1000), 'each period ran after its callback');
  const control = deviceProbe('naudiodon', 400);
  t.equal(control.status, 0, 'the control ran');
  // Its Buffers are collected as they go, so its ArrayBuffer bytes can fall over a window; its count cannot.
  t.ok(
    control.result!.libraryBuffers >= control.result!.window,
    `naudiodon, the control: ${control.result!.libraryBuffers} Buffers over ${control.result!.window} periods`,
  );
});

t.test("the addon's audio calls check their arguments", { skip: noPortAudio }, async (t) => {
  const sab = (n: number) => new Float32Array(new SharedArrayBuffer(4 * n));
  const control = new Int32Array(new SharedArrayBuffer(4 * native.audioWords.count));
  const open =
    (mic: Float32Array, out: Float32Array, c = control) =>
    () =>
      native.audioOpen(0, 0, 48000, 1, 1, 480, c, mic, out, () => undefined);
  t.throws(open(new Float32Array(1024), sab(1024)), /mic must be a view of a SharedArrayBuffer/);
  t.throws(open(sab(1000), sab(1024)), /powers of two/);
  t.throws(open(sab(1024), sab(1024), new Int32Array(new SharedArrayBuffer(8))), /control must hold 16 words/);
  t.throws(() => native.audioStart(12345), /no such open stream/);
  t.throws(() => native.audioClose(-1), /handle/);
});

// A process, or a worker thread, that ends with a stream still open: the stream stops before
// the buffers its callback writes go away (a crash at exit otherwise).
t.test(
  "ending with the addon's stream open: the process exits cleanly, and a worker's end leaves the main thread's stream running",
  { skip: noPortAudio },
  async (t) => {
    const { env } = virtualDevices(new Float32Array(RATE * 4));
    const devices = new URL('../../src/io/devices.js', import.meta.url).href;
    const open = `const { findDevice, openDuplexDevice } = await import(${JSON.stringify(devices)});
    const d = openDuplexDevice({ input: findDevice('voxmic', 'input'), output: findDevice('voxspk', 'output'), rate: ${RATE} });
    const p = new Float32Array(d.period);`;
    const exitOpen = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `${open}
    let k = 0;
    d.start(() => { d.tick(p, p, p); if (++k === 30) process.exit(0); });`,
      ],
      { encoding: 'utf8', timeout: 60_000, env },
    );
    t.equal(exitOpen.status, 0, `process.exit with the stream running: exit 0 (${exitOpen.stderr.trim().split('\n').at(-1) ?? ''})`);
    const worker = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `
    import { Worker } from 'node:worker_threads';
    ${open}
    let k = 0;
    await new Promise((resolve) => d.start(() => { d.tick(p, p, p); if (++k === 20) resolve(); }));
    const w = new Worker(\`
      const { findDevice, openDuplexDevice } = await import(${JSON.stringify(devices)});
      const d = openDuplexDevice({ input: findDevice('voxspk', 'input'), output: findDevice('voxspk', 'output'), rate: ${RATE} });
      const p = new Float32Array(d.period);
      let k = 0;
      d.start(() => { d.tick(p, p, p); if (++k === 10) process.exit(0); });\`, { eval: true, type: 'module' });
    await new Promise((resolve) => w.on('exit', resolve));
    const before = k;
    await new Promise((resolve) => setTimeout(resolve, 300));
    await d.stop();
    console.log(JSON.stringify({ before, after: k }));`,
      ],
      { encoding: 'utf8', timeout: 60_000, env },
    );
    t.equal(worker.status, 0, `a worker ended with its stream open (${worker.stderr.trim().split('\n').at(-1) ?? ''})`);
    const r = JSON.parse(worker.stdout.trim().split('\n').at(-1) ?? '{}') as { before: number; after: number };
    t.ok(r.after > r.before, `the main thread's stream kept running after the worker's ended (${r.before} → ${r.after} periods)`);
  },
);

t.test('VOXSLAB_AUDIO names the device library; anything else is one line, exit 4', async (t) => {
  const { env } = virtualDevices(new Float32Array(RATE));
  const bad = voxslab({ ...env, VOXSLAB_AUDIO: 'alsa' }, 'devices');
  t.equal(bad.status, 4, 'exit 4');
  t.match(bad.stderr, /field VOXSLAB_AUDIO: must be portaudio or naudiodon, got "alsa"/);
  t.equal(bad.stderr.trim().split('\n').length, 1, 'one line');
  const nd = voxslab({ ...env, VOXSLAB_AUDIO: 'naudiodon' }, 'devices', '--json');
  t.equal(nd.status, 0, 'naudiodon lists the devices too');
  t.match(nd.stdout, /voxmic/);
});

t.test('a duplex device is closed once however its stream ends (two closes at once can hang PortAudio)', async (t) => {
  const { env } = virtualDevices(new Float32Array(RATE));
  const devices = new URL('../../src/io/devices.js', import.meta.url).href;
  const script = `
    import { findDevice, PortAudioDevice } from ${JSON.stringify(devices)};
    const d = new PortAudioDevice({ input: findDevice('voxmic', 'input'), output: findDevice('voxspk', 'output'), rate: ${RATE} });
    const played = new Float32Array(d.period), mic = new Float32Array(d.period), far = new Float32Array(d.period);
    let periods = 0;
    await new Promise((resolve) => d.start(() => { d.tick(played, mic, far); if (++periods === 50) resolve(); }));
    await d.stop();
    // naudiodon's own end-of-stream handler runs after the stop; give it time to ask again.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    process.stdout.write('result ' + JSON.stringify({ closeRequests: d.closeRequests, periods }) + '\\n');`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 60_000, env });
  t.equal(r.status, 0, `the process ends (${r.stderr.trim().split('\n').at(-1) ?? ''})`);
  // naudiodon prints on stdout too.
  const out = JSON.parse(/^result (.*)$/m.exec(r.stdout)?.[1] ?? 'null') as { closeRequests: number; periods: number };
  t.ok(out.periods >= 50, 'the device ran');
  t.equal(out.closeRequests, 1, 'PortAudio is asked to close the streams once');
});

t.test('voxslab talk: a missing device is a clear error, exit 4', async (t) => {
  const { env } = virtualDevices(new Float32Array(RATE));
  const r = voxslab(env, 'talk', '--input-device', 'no-such-microphone', '--seconds', '1');
  t.equal(r.status, 4, `exit 4 (${r.stderr.slice(-300)})`);
  t.match(r.stderr, /audio device no-such-microphone: no such input device/);
  t.notMatch(r.stderr, /ALSA lib/, "alsa-lib's messages about missing sound cards are kept quiet");
  const both = voxslab(env, 'talk', '--loopback', 'x.wav', '--input-device', 'voxmic');
  t.equal(both.status, 2, 'loopback and devices together are a usage error');
});

t.test('voxslab serve --input-device --output-device: the daemon holds a live conversation on the devices', { skip }, async (t) => {
  const { env } = virtualDevices(speech48k());
  // The tiny checkpoint's random weights choose how long a reply runs: two seconds at most, so
  // the turn ends (and is logged) within the wait below.
  const s = await spawnServe(['--port', '0', '--input-device', 'voxmic', '--output-device', 'voxspk', '--rate', String(RATE), '--reply', '2'], env);
  try {
    const health = (await (await fetch(`${s.url}/healthz`)).json()) as { headless: boolean; devices: string };
    t.equal(health.headless, false, 'not headless');
    t.match(
      health.devices,
      new RegExp(`voxmic → voxspk at 48000 Hz \\(${native.audioAvailable() ? 'portaudio' : 'naudiodon'}\\)`),
      '/healthz names the devices and their library',
    );
    const list = (await (await fetch(`${s.url}/v1/conversations`)).json()) as { conversations: { id: string }[] };
    t.ok(
      list.conversations.some((c) => c.id === 'device'),
      'the device conversation is listed',
    );
    // The spoken question is answered on the speaker (the transcript goes to the log).
    for (let k = 0; k < 300 && !/device \[[\d.]+ s\] assistant/.test(s.stderr()); k++) await delay(100);
    t.match(s.stderr(), /device \[[\d.]+ s\] user speaking.*device \[[\d.]+ s\] user done.*device \[[\d.]+ s\] assistant \(/s, 'heard, answered, logged');
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    t.match(metrics, /voxslab_turns_total [1-9]/, 'counted in /metrics');
    t.match(metrics, /voxslab_device_xruns\{kind="underrun"\} \d+/, 'with the device’s xruns');
  } finally {
    s.proc.kill('SIGTERM');
  }
  t.equal(await s.exited, 0, 'SIGTERM ends it, exit 0');
  t.match(s.stderr(), /stopped: 0 bytes held, 0 reserved/, 'every byte back, the device conversation’s too');
  const missing = voxslab(env, 'serve', '--port', '0', '--input-device', 'no-such-microphone');
  t.equal(missing.status, 4, `a missing device: exit 4 (${missing.stderr.trim().split('\n').at(-1)})`);
});

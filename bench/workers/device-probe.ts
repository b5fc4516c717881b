// Child process: one duplex device on virtual ALSA devices (ALSA_CONFIG_PATH) for `periods`
// periods, on the library VOXSLAB_AUDIO names (see bench/devices.ts). Prints one JSON line.
import { findDevice, openDuplexDevice } from '../../src/io/devices.js';
import { native } from '../../src/native.js';

const periods = Number(process.argv[2]);
const device = openDuplexDevice({ input: findDevice('voxmic', 'input'), output: findDevice('voxspk', 'output'), rate: 48000 });
const n = device.period;
const played = Float32Array.from({ length: n }, (_, i) => Math.sin(i));
const mic = new Float32Array(n);
const far = new Float32Array(n);
const at = new Float64Array(periods); // when each period ran, ms (the native monotonic clock)
const callback = new Int32Array(periods); // its callback's time, µs modulo 2^32 (the addon's device)
const control = device.library === 'portaudio' ? (device as { control: Int32Array }).control : null;
const callbackWord = native.audioWords.callbackUs;
// Warm up before the allocation window: the first half compiles the path.
const warm = periods >> 1;
let k = 0;
let before = { heap: 0, arrayBuffers: 0, buffers: 0 };
const start = performance.now();
// The period itself allocates nothing: times go into typed arrays, the rest is worked out after.
await new Promise<void>((resolve, reject) => {
  device.start(() => {
    if (device.failure !== null) return reject(device.failure);
    if (k >= periods) return;
    native.clockInto(at, k);
    if (control !== null) callback[k] = control[callbackWord]!;
    device.tick(played, mic, far);
    if (++k === warm) {
      const m = process.memoryUsage();
      before = { heap: m.heapUsed, arrayBuffers: m.arrayBuffers, buffers: device.libraryBuffers };
    }
    if (k === periods) resolve();
  });
});
const m = process.memoryUsage();
const seconds = (performance.now() - start) / 1000;
await device.stop();
// After warm-up: the first periods also drain what the device ran ahead.
const intervals = Array.from(at.subarray(warm + 1), (t, i) => t - at[warm + i]!);
process.stdout.write(
  `${JSON.stringify({
    library: device.library,
    periodMs: (1000 * n) / device.rate,
    seconds,
    intervals,
    wakeMs:
      control === null
        ? []
        : Array.from(at.subarray(warm), (t, i) => (((Math.round(t * 1000) % 2 ** 32) - (callback[warm + i]! >>> 0) + 2 ** 32) % 2 ** 32) / 1000),
    window: periods - warm,
    arrayBufferGrowth: m.arrayBuffers - before.arrayBuffers,
    heapGrowth: m.heapUsed - before.heap,
    libraryBuffers: device.libraryBuffers - before.buffers,
    overruns: device.overruns,
  })}\n`,
);

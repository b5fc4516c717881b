/**
 * Typed facade over the compiled native addon (native/). Every function may be called from
 * any thread, main or worker; pinning and CPU queries act on the calling thread.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { BadInputError, InternalError } from './errors.js';

export interface NativeResult {
  ok: boolean;
  /** 0 on success, else the operating system's errno. */
  errno: number;
  message: string;
}

export interface PinResult extends NativeResult {
  /** False where thread affinity is not implemented (not Linux). */
  supported: boolean;
  /** The CPU the thread runs on after pinning, or -1 when unknown. */
  cpu: number;
}

export interface CpuFeatures {
  arch: 'x64' | 'arm64' | 'other';
  sse42: boolean;
  avx: boolean;
  avx2: boolean;
  fma: boolean;
  f16c: boolean;
  avx512f: boolean;
  avx512bw: boolean;
  avx512vl: boolean;
  avx512vnni: boolean;
  neon: boolean;
  /** AArch64 SDOT/UDOT. */
  dotprod: boolean;
  /** AArch64 SMMLA/USMMLA/USDOT. */
  i8mm: boolean;
}

/**
 * The addon's argument codes, named once (native/src/kernels.h declares the same values as
 * enums): weight encodings, norm and activation kinds, attention masks, conv1d modes.
 */
export const WEIGHT_TYPE = { f32: 0, f16: 1, bf16: 2, q8: 3, q4: 4 } as const;
export const NORM = { rms: 0, layer: 1 } as const;
export const ACTIVATION = { gelu: 0, silu: 1, swiglu: 2, glu: 3 } as const;
export const ATTENTION_MASK = { full: 0, causal: 1, sliding: 2 } as const;
export const CONV_MODE = { causal: 0, same: 1 } as const;

export type ByteView =
  | Uint8Array
  | Int8Array
  | Uint8ClampedArray
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

/** An audio processing engine owned by the addon (freed by apmDestroy or when collected). */
export type ApmHandle = { readonly __apm: unique symbol };

export interface NativeAddon {
  /** Pins the calling thread to `cpus`. Throws TypeError/RangeError on bad CPU lists. */
  pinThread(cpus: number[]): PinResult;
  allowedCpus(): number[];
  /** Per native compute helper of the calling thread (setComputeThreads), the CPUs it may run on. */
  computeHelperCpus(): number[][];
  currentCpu(): number;
  /** Writes monotonic milliseconds (any origin) into out[index]; nothing is left on the JS heap. */
  clockInto(out: Float64Array, index: number): void;
  /** Writes the calling thread's CPU milliseconds into out[index] (-1 where the OS has no such clock). */
  threadCpuInto(out: Float64Array, index: number): void;
  /** dst[dstAt…] = src[srcAt…], n floats (overlap allowed); boxes nothing however cold the caller is. */
  copyF32(src: Float32Array, srcAt: number, dst: Float32Array, dstAt: number, n: number): void;
  affinitySupported(): boolean;
  configuredCpus(): number;
  pageSize(): number;
  /** Resident bytes of the view's byte range (mincore). */
  residentBytes(view: ByteView): number;
  /** The low 30 bits of the address of the view's first byte (its residue modulo a power of two up to 2^30). */
  addressLow(view: ByteView): number;
  /** mlock every page overlapping the view. */
  lockRange(view: ByteView): NativeResult;
  unlockRange(view: ByteView): NativeResult;
  /** Asks for transparent huge pages on the view's whole pages (Linux madvise; ENOSYS elsewhere). */
  adviseHugePages(view: ByteView): NativeResult;
  cpuFeatures(): CpuFeatures;
  /** Index of the first NaN or infinity among the values (WEIGHT_TYPE f32, f16 or bf16) of `bytes`, or -1. */
  firstNonFinite(bytes: Uint8Array, type: number): number;
  /** Silences alsa-lib's own error messages; false when built without ALSA. */
  quietAlsa(): boolean;
  /** Whether the addon was built with PortAudio (audio.cc); the audio calls throw when not. */
  audioAvailable(): boolean;
  /** Every device PortAudio sees (latencies in seconds). */
  audioDevices(): {
    id: number;
    name: string;
    hostApi: string;
    inputs: number;
    outputs: number;
    defaultRate: number;
    /** Seconds, as PortAudio gives them. */
    inputLatency: number;
    outputLatency: number;
    defaultInput: boolean;
    defaultOutput: boolean;
  }[];
  /**
   * Opens (not starts) a duplex float32 stream whose callback fills `mic` (channel 0) and plays
   * `out` through SPSC rings (SharedArrayBuffer views, power-of-two lengths) with the counters in
   * `control` (audioWords); `onWake` runs on this thread after callbacks (one call queued at most).
   */
  audioOpen(
    inputId: number,
    outputId: number,
    rate: number,
    inChannels: number,
    outChannels: number,
    period: number,
    control: Int32Array,
    mic: Float32Array,
    out: Float32Array,
    onWake: () => void,
  ): number;
  audioStart(handle: number): void;
  /** Stops and closes the stream; its callbacks are over when this returns. */
  audioClose(handle: number): void;
  /**
   * Blocks of at least `bytes` (4096..2^25) get their own mappings from the C allocator, given back
   * to the system when freed; false where the allocator has no such setting (not glibc).
   * Process-wide: for voxslab's own processes (the daemon), never for a host application.
   */
  mallocMmapThreshold(bytes: number): boolean;
  /** Bytes the C allocator's arenas (every thread's) hold from the system, outside its own mappings; -1 where unknown. */
  mallocArenaBytes(): number;
  /** Bytes the C allocator has handed out and not had back (every arena and its own mappings); -1 where unknown. */
  mallocInUseBytes(): number;
  /** Gives the C allocator's free arena memory back to the system (process-wide; for measurements); false where unsupported. */
  mallocTrim(): boolean;
  /** The handler installed for signal `signo`: 0 the default, 1 ignored, else its address (-1: unknown). */
  signalHandler(signo: number): number;
  /** True when the addon was linked with WebRTC's audio processing module. */
  apmAvailable(): boolean;
  /** One engine: echo 0 (off)..3 suppression low/moderate/high, highPass 0|1, noise 0 (off)..4, voice 0 (off)..4 likelihood, delayAgnostic 0|1. */
  apmCreate(echo: number, highPass: number, noise: number, voice: number, delayAgnostic: number): { handle: ApmHandle; heapBytes: number };
  apmDestroy(handle: ApmHandle): void;
  /** One 10 ms frame at 16 kHz; flags 1 voice, 2 echo present; negative = engine error. */
  apmProcess(
    handle: ApmHandle,
    near: Float32Array,
    nearAt: number,
    far: Float32Array | null,
    farAt: number,
    out: Float32Array,
    outAt: number,
    delayMs: number,
  ): number;
  /** The voice likelihood (1 very low..4 high) of an engine made with voice detection, between frames. */
  apmSetVoice(handle: ApmHandle, voice: number): void;
  /**
   * Streaming polyphase resampling over caller-owned buffers (see dsp/resample.ts for the
   * layouts). `input` null flushes with zeros until `limit` outputs exist. Returns outputs
   * written to out[outAt…]; throws RangeError if `out` lacks room for them.
   */
  resampleRun(
    phases: Float64Array,
    ring: Float64Array,
    state: Float64Array,
    input: Float32Array | null,
    count: number,
    out: Float32Array,
    outAt: number,
    limit: number,
  ): number;
  /** Mixed-radix complex FFT with the caller's plan, twiddles and scratch (dsp/fft.ts). */
  fft(factors: Int32Array, twiddles: Float64Array, scratch: Float64Array, input: Float64Array, output: Float64Array, n: number, inverse: boolean): void;
  /** Real-input FFT of even n via an n/2-point complex plan (dsp/fft.ts RealFFT). */
  rfft(
    factors: Int32Array,
    twiddles: Float64Array,
    scratch: Float64Array,
    split: Float64Array,
    work: Float64Array,
    input: Float64Array,
    output: Float64Array,
    n: number,
    inverse: boolean,
  ): void;
  /**
   * The ISTFT's spectrum: e^{values[at + k]}·(cos, sin)(values[at + bins + k]) into
   * spectrum[2k], spectrum[2k + 1], with the addon's own exp and sine (the same bits on every machine).
   */
  polarSpectrum(values: Float32Array, at: number, bins: number, spectrum: Float64Array): void;
  /** The ISTFT's overlap-add: frame[j]·window[j] and window[j]² into the rings at (start + j) & mask, j from `from`. */
  overlapAdd(frame: Float64Array, window: Float64Array, acc: Float64Array, envelope: Float64Array, start: number, from: number): void;
  /** Samples from…to of the rings (acc ÷ envelope above `floor`, else 0) into out[outAt…], clearing them; returns the count. */
  overlapEmit(acc: Float64Array, envelope: Float64Array, from: number, to: number, floor: number, out: Float32Array, outAt: number): number;
  gemv(
    type: number,
    w: Float32Array | Uint16Array | Uint8Array,
    scales: Uint16Array | null,
    biases: Uint16Array | null,
    group: number,
    x: Float32Array,
    y: Float32Array,
    M: number,
    K: number,
    xsum: Float32Array | null,
  ): void;
  /** Threads sharing each GEMV's rows (1–8); returns the count now in use. */
  setComputeThreads(n: number): number;
  computeThreads(): number;
  /** The calling thread's split calls that used fewer threads than it has, because other threads' pools were computing (they divide the process's CPUs). */
  computeNarrowed(): number;
  /** The calling thread enters (true) or leaves a compute section: meanwhile every pool's split calls count it as computing. */
  computeScope(on: boolean): void;
  gemvInt(
    type: number,
    w: Uint8Array,
    scales: Uint16Array,
    biases: Uint16Array,
    group: number,
    x: Float32Array,
    y: Float32Array,
    M: number,
    K: number,
    scratch: Float32Array,
  ): void;
  /** gemvIntMany(type, X, n, K, scratch, count, then per matrix: w, scales, biases, group, Y, M). */
  gemvIntMany(
    type: number,
    x: Float32Array,
    n: number,
    K: number,
    scratch: Float32Array,
    count: number,
    ...matrices: (Uint8Array | Uint16Array | Float32Array | number)[]
  ): void;
  gemvRows(
    type: number,
    w: Float32Array | Uint16Array | Uint8Array,
    scales: Uint16Array | null,
    biases: Uint16Array | null,
    group: number,
    X: Float32Array,
    Y: Float32Array,
    n: number,
    M: number,
    K: number,
    scratch: Float32Array | null,
  ): void;
  /** The prefill kernel, with gemvRows' arguments; q8/q4 weights and a scratch only (others are refused). */
  gemmInt: NativeAddon['gemvRows'];
  gemm(
    A: Float32Array,
    type: number,
    W: Float32Array | Uint16Array | Uint8Array,
    scales: Uint16Array | null,
    biases: Uint16Array | null,
    group: number,
    bias: Float32Array | null,
    C: Float32Array,
    T: number,
    N: number,
    K: number,
    pack: Float32Array,
  ): void;
  norm(kind: number, x: Float32Array, w: Float32Array, b: Float32Array | null, y: Float32Array, rows: number, dim: number, eps: number): void;
  addNorm(x: Float32Array, r: Float32Array, w: Float32Array, y: Float32Array, rows: number, dim: number, eps: number): void;
  activation(kind: number, x: Float32Array, y: Float32Array, n: number, other: Float32Array | number | null): void;
  rope(x: Float32Array, cos: Float32Array, sin: Float32Array, rows: number, heads: number, hd: number, pos0: number, adjacent: boolean): void;
  attention(
    q: Float32Array,
    k: Float32Array | Uint16Array,
    v: Float32Array | Uint16Array,
    out: Float32Array,
    p: Float32Array | null,
    u: Float32Array | null,
    vb: Float32Array | null,
    scratch: Float32Array,
    Tq: number,
    Tk: number,
    Hq: number,
    Hkv: number,
    hd: number,
    qpos0: number,
    kpos0: number,
    window: number,
    mode: number,
    scale: number,
    tq: number,
    tk: number,
  ): void;
  conv1d(
    mode: number,
    x: Float32Array,
    w: Float32Array,
    third: Float32Array | null,
    y: Float32Array,
    T: number,
    C: number,
    k: number,
    t0: number,
    t1: number,
  ): void;
  conv2dS2(
    input: Float32Array,
    Cin: number,
    inRow0: number,
    inRows: number,
    inTotal: number,
    inCols: number,
    w: Float32Array,
    bias: Float32Array | null,
    depthwise: boolean,
    out: Float32Array,
    Cout: number,
    outRow0: number,
    outRows: number,
    outCols: number,
    relu: boolean,
  ): void;
  pointwise(input: Float32Array, w: Float32Array, bias: Float32Array | null, out: Float32Array, Cin: number, Cout: number, P: number, relu: boolean): void;
  fmaProbe(iterations: number): number;
  /** f32 lanes per FMA in the probe of the chosen path. */
  fmaLanes(): number;
  /** The integer GEMM's multiply instruction, `iterations` × 12 independent chains (int8Macs() multiply-adds each). */
  int8Probe(iterations: number): number;
  /** Multiply-adds per instruction of int8Probe; 0 where there is none. */
  int8Macs(): number;
  /** `bytes` (a page multiple) of shared memory mapped twice, back to back (Linux); `address` names it. */
  mirrorCreate(bytes: number): { ok: boolean; errno: number; message: string; address?: bigint };
  /** This thread's view of both halves of a mirrored mapping (2 × its bytes). */
  mirrorView(address: bigint): ArrayBuffer;
  /** The creator's reference back: the mapping goes when the last view is collected too. */
  mirrorRelease(address: bigint): void;
  /** Reads every float of x (streams per thread), split among setComputeThreads threads. */
  readProbe(x: Float32Array): number;
  /**
   * Instruction set of the compute kernels chosen at load: 'avx512f+vnni', 'avx512f', 'avx2+fma' or 'scalar' on x86-64;
   * 'i8mm', 'dotprod', 'neon' or 'scalar' on AArch64 (VOXSLAB_KERNELS may force a lower one).
   */
  kernelIsa(): string;
  /** The dot-product path chosen at load: 'avx2+fma', 'neon' or 'scalar'. */
  kernelPath(): string;
  /** VOXSLAB_KERNELS when it names no instruction set, else ''. */
  kernelsRequestError(): string;
  /** The levels VOXSLAB_KERNELS may name on this architecture, lowest first, comma-separated. */
  kernelLevels(): string;
  /** Bytes of scratch gemvInt needs for K inputs quantized in groups of `group`. */
  gemvScratchBytes(K: number, group: number): number;
  gemmIntScratchBytes(n: number, K: number, group: number): number;
  /** Floats of scratch the tiled attention needs (never a function of the sequence length). */
  attentionScratchFloats(tq: number, tk: number, hd: number, group: number, hkv: number): number;
  /** Floats of packing scratch gemm needs. */
  readonly gemmPackFloats: number;
  /** The words of an audio stream's control block (audioOpen). */
  readonly audioWords: Readonly<{
    micWrite: number;
    micRead: number;
    outWrite: number;
    outRead: number;
    overruns: number;
    underruns: number;
    callbacks: number;
    pending: number;
    status: number;
    finished: number;
    callbackUs: number;
    frames: number;
    count: number;
  }>;
  /** The named slots of the resampler's state block (a Float64Array the caller owns). */
  readonly resamplerSlots: Readonly<{ pos: number; inputs: number; outputs: number; up: number; down: number; taps: number; center: number; slots: number }>;
}

const require = createRequire(import.meta.url);

function load(): NativeAddon {
  // VOXSLAB_ADDON points at another build of the same sources (native/sanitize.sh's).
  const path = process.env.VOXSLAB_ADDON || fileURLToPath(new URL('../../native/build/Release/voxslab_native.node', import.meta.url));
  try {
    return require(path) as NativeAddon;
  } catch (cause) {
    throw new InternalError(`voxslab: the native addon is not built (${path}); run 'npm install' or 'npm run build:native'`, { cause });
  }
}

export const native: NativeAddon = load();

/** The levels VOXSLAB_KERNELS may name on this machine's architecture, lowest first. */
export const KERNEL_LEVELS: readonly string[] = native.kernelLevels().split(',');

// Checked here, once per thread that loads the addon: the native side cannot throw while it loads.
const badKernels = native.kernelsRequestError();
if (badKernels !== '') {
  throw new BadInputError(
    { field: 'VOXSLAB_KERNELS' },
    `'${badKernels}' names no instruction set (${KERNEL_LEVELS.slice(0, -1).join(', ')} or ${KERNEL_LEVELS.at(-1)})`,
  );
}

/** `voxslab resample` and `voxslab mel`. */
import { BadInputError } from '../errors.js';
import { checkOutputs, openFileSource, staged, WavFileWriter, writeWhole } from '../io/files.js';
import { MelFrontend, normaliseRows } from '../dsp/mel.js';
import { encodeNpyFloat32 } from '../dsp/npy.js';
import { Resampler } from '../dsp/resample.js';
import { WavReader } from '../dsp/wav.js';
import { parseFlag } from '../options.js';

const CHUNK = 8192;
/** The largest feature matrix `mel` builds (it holds the whole matrix to normalise it). */
const MAX_MEL_BYTES = 256 << 20;

/** Resamples every channel of a WAV file to `rate`; the output keeps the input's sample format. */
export function resampleFile(input: string, rateText: string, output: string): string {
  const rate = parseFlag('resampleRate', rateText) as number;
  checkOutputs([['--in', input]], [['--out', output]]);
  const src = openFileSource(input);
  try {
    const reader = new WavReader(src, CHUNK);
    const { channels, sampleRate, format, extensible } = reader.info;
    const resamplers = Array.from({ length: channels }, () => new Resampler(sampleRate, rate));
    const frames = new Float32Array(CHUNK * channels);
    const lane = new Float32Array(CHUNK);
    const maxOut = (resamplers[0] as Resampler).maxOutput(CHUNK) + (resamplers[0] as Resampler).taps;
    const outLanes = resamplers.map(() => new Float32Array(maxOut));
    const interleaved = new Float32Array(maxOut * channels);
    return staged(output, '--out', (tmp) => {
      const writer = new WavFileWriter(tmp, { sampleRate: rate, channels, format, extensible }, { shown: output });
      const emit = (counts: number[]): void => {
        const n = counts[0] as number;
        for (let c = 0; c < channels; c++) {
          const l = outLanes[c] as Float32Array;
          for (let i = 0; i < n; i++) {
            const v = l[i] as number;
            // Huge but finite samples can overflow the filter's float32 sums: refuse, never write Inf.
            if (!Number.isFinite(v))
              throw new BadInputError(
                { file: input, field: 'data' },
                'samples this large overflow 32-bit floats when resampled (the output would not be finite)',
              );
            interleaved[i * channels + c] = v;
          }
        }
        writer.write(interleaved.subarray(0, n * channels));
      };
      let inFrames = 0;
      let outFrames = 0;
      for (;;) {
        const n = reader.read(frames, CHUNK);
        if (n === 0) break;
        inFrames += n;
        const counts = resamplers.map((r, c) => {
          for (let i = 0; i < n; i++) lane[i] = frames[i * channels + c] as number;
          return r.push(lane.subarray(0, n), outLanes[c] as Float32Array, 0);
        });
        emit(counts);
        outFrames += counts[0] as number;
      }
      const tail = resamplers.map((r, c) => r.finish(outLanes[c] as Float32Array, 0));
      emit(tail);
      outFrames += tail[0] as number;
      writer.close();
      return `${input}: ${inFrames} frames at ${sampleRate} Hz → ${output}: ${outFrames} frames at ${rate} Hz (${channels} channel(s), ${format})`;
    });
  } finally {
    src.close();
  }
}

/**
 * Log-mel features of a 16 kHz WAV file (downmixed to mono) as .npy float32 [frames, 128]:
 * normalised per feature as the encoder receives them, or raw log-mel with `raw`.
 */
export function melFile(input: string, output: string, raw: boolean): string {
  checkOutputs([['--in', input]], [['--out', output]]);
  const src = openFileSource(input);
  try {
    const reader = new WavReader(src, CHUNK);
    const mel = new MelFrontend();
    if (reader.info.sampleRate !== mel.sampleRate) {
      throw new BadInputError(
        { file: input, field: 'fmt.sampleRate' },
        `the frontend needs ${mel.sampleRate} Hz audio, this file is ${reader.info.sampleRate} Hz (convert it with 'voxslab resample --rate ` +
          `${mel.sampleRate}')`,
      );
    }
    const rows = mel.rowsFor(reader.info.frames);
    if (rows * mel.nMels * 4 > MAX_MEL_BYTES) {
      const limit = Math.floor(((MAX_MEL_BYTES / (mel.nMels * 4)) * mel.hop) / mel.sampleRate / 60);
      throw new BadInputError(
        { file: input, field: 'data' },
        `${(reader.info.frames / mel.sampleRate / 60).toFixed(1)} minutes of audio; mel writes at most ${MAX_MEL_BYTES >> 20} MiB of features ` +
          `(about ${limit} minutes): split the file`,
      );
    }
    const out = new Float32Array(rows * mel.nMels);
    const chunk = new Float32Array(CHUNK);
    for (;;) {
      const n = reader.readMono(chunk);
      if (n === 0) break;
      mel.push(chunk.subarray(0, n), out);
    }
    mel.finish(out);
    if (!raw) normaliseRows(out, rows, mel.nMels, Math.floor(reader.info.frames / mel.hop), new Float64Array(2 * mel.nMels));
    writeWhole(output, encodeNpyFloat32(out, [rows, mel.nMels]));
    return `${input}: ${reader.info.frames} samples → ${output}: [${rows}, ${mel.nMels}] float32 (${raw ? 'raw log-mel' : 'normalised'})`;
  } finally {
    src.close();
  }
}

/** What describes an audio device and how one is opened, for either device library. */
/** One device, as `voxslab devices` lists it. */
export interface AudioDevice {
  id: number;
  name: string;
  hostApi: string;
  inputs: number;
  outputs: number;
  defaultRate: number;
  /** PortAudio's low-latency defaults, ms. */
  inputLatencyMs: number;
  outputLatencyMs: number;
  defaultInput: boolean;
  defaultOutput: boolean;
}

export interface PortAudioOptions {
  input: AudioDevice;
  output: AudioDevice;
  rate: number;
  /** Samples per period. Default 10 ms. */
  period?: number;
  /** Input ring, seconds. Default 2. */
  bufferSeconds?: number;
}

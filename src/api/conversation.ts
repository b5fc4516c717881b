/**
 * One conversation on an Engine as the application sees it (push methods, a Duplex stream, typed
 * events, an async iterator) over one pipeline conversation read through its port. A turn is the
 * speech up to `endTurn()`, the longest segment, or (VAD) the endpointer's end; speech written
 * during a reply is the next turn. The application gets copies: one typed array per block.
 *
 * Thread contract: one thread (the application's); the stages run in their own workers.
 */
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import type { DuplexDevice } from '../core/session.js';
import { ArgumentError, ClosedError, type WorkerError } from '../errors.js';
import type { ClockedDevice } from '../io/devices.js';
import type { PipelineConversation } from '../runtime/coordinator.js';
import { readTurnFields } from '../runtime/protocol.js';
import { type BargeVerdict, ConversationPort, OUT_REPLY_END } from '../runtime/port.js';
import { EventIterators } from './iterators.js';
import { checkFadeMs, FADE_MS } from '../duplex/fader.js';
import { InputQueue } from './input.js';
import { sampleStream } from './stream.js';
import { checkFinite, fromBytes, fromSamples, toS16 } from './samples.js';
import type { ConversationEvent, ConversationEvents, ConversationSettings, SampleFormat, TurnSummary } from './types.js';
import { engineSettings, nextSettings, type Settings, settingsWords } from './settings.js';
import { aborted, type ConversationHost, kAttach, kDetach, kFail, kPump } from './host.js';
import { type DeviceHost, type DeviceLink, deviceLink, driveDevice, flushBacklog } from './device.js';

interface Waiter {
  resolve(t: TurnSummary): void;
  reject(e: Error): void;
}

/** One conversation on an Engine. */
export class Conversation extends EventEmitter<ConversationEvents> {
  readonly #host: ConversationHost;
  readonly index: number;
  readonly inputRate: number;
  readonly outputRate: number;
  readonly format: SampleFormat;
  readonly #pc: PipelineConversation;
  readonly #port: ConversationPort;
  /** Input not yet in the ring; `null` marks the end of a turn. */
  readonly #queue: InputQueue;
  #queuedThisTurn = 0;
  #fedThisTurn = 0;
  readonly #maxTurnSamples: number;
  /** Turns of speech ended (the port counts the replies: a reply may play while the next turn is spoken). */
  #spoken = 0;
  #inTurn = false;
  /** When each turn not yet replied to ended. */
  readonly #endedAt: number[] = [];
  #firstAudioAt = -1;
  #tokens: number[] = [];
  #text = '';
  #samples = 0;
  /** The device the conversation runs on (`run`), or null. */
  #link: DeviceLink | null = null;
  readonly #pcm: Float32Array;
  #outputPaused = false;
  #stream: Duplex | null = null;
  #streamEndPending = false;
  #closing: Promise<void> | null = null;
  readonly #waiters: Waiter[] = [];
  readonly #iterators = new EventIterators<ConversationEvent>();

  /** VAD mode: the silence `endTurn()` feeds (null: the application ends turns). */
  #flush: Float32Array | null;
  /** VAD mode: the settings in force (`update`). */
  readonly #settings: Settings;

  /** @internal Use `engine.open()`. */
  constructor(host: ConversationHost, pc: PipelineConversation, format: SampleFormat, segmentSeconds: number, vadSilenceMs = 0) {
    super();
    this.#host = host;
    this.#pc = pc;
    this.#port = new ConversationPort(host.pipeline, pc, {
      text: (token) => this.#textToken(token),
      speechStart: () => {
        this.#inTurn = true;
        this.#fedThisTurn = 0;
        this.#emit('speech_start', { turn: this.#spoken });
      },
      speechEnd: (turn) => {
        if (turn) this.#endTurnFed('vad');
        else {
          this.#emit('speech_end', { turn: this.#spoken, samples: this.#fedThisTurn, reason: 'dropped' });
          this.#inTurn = false;
        }
      },
      barge: (v) => this.#bargeIn(v),
    });
    this.#device = {
      port: this.#port,
      pipeline: host.pipeline,
      pump: () => this[kPump](),
      audio: (pcm) => void this.#audio(pcm),
      replyEnd: () => this.#replyEnd(),
      fed: (n) => {
        this.#fedThisTurn += n;
      },
      owed: () => this.#port.replied < this.#spoken,
      wake: () => host.wake(),
    };
    this.index = pc.index;
    this.inputRate = pc.inputRate;
    this.outputRate = host.outputRate;
    this.format = format;
    this.#maxTurnSamples = Math.floor(segmentSeconds * pc.inputRate);
    this.#pcm = new Float32Array(pc.output.maxPayload);
    this.#queue = new InputQueue(pc.chunk);
    this.#flush = vadSilenceMs > 0 ? this.#silence(vadSilenceMs) : null;
    this.#settings = engineSettings(host.pipeline.setup.options);
  }

  /** Enough silence to end the speech in progress when the turn's silence is `ms`. */
  #silence(ms: number): Float32Array {
    return new Float32Array(Math.ceil(((ms + 200) * this.inputRate) / 1000));
  }

  /** VAD mode: the turn-taking settings in force (see `update`). */
  get settings(): Readonly<Required<ConversationSettings>> {
    return { ...this.#settings };
  }

  /**
   * Changes how a VAD conversation takes turns while it runs. The silence and the shortest
   * speech apply from the next turn when the user is speaking now (a turn is judged by one
   * rule), the VAD's likelihood from its next frame, the look-ahead from the next generated
   * frame. Every value is checked before any applies (ArgumentError).
   */
  update(settings: ConversationSettings): void {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (!this.#pc.vad) throw new ArgumentError(`conversation ${this.index} was opened without vad: true; the application ends its turns`);
    const so = this.#host.pipeline.setup.options;
    const next = nextSettings(this.#settings, settings, so);
    Object.assign(this.#settings, next);
    if (settings.silenceMs !== undefined) this.#flush = this.#silence(next.silenceMs);
    this.#port.settings(settingsWords(next, so));
    this.#host.wake();
  }

  get closed(): boolean {
    return this.#closing !== null;
  }

  /**
   * Queues user speech at `inputRate`: floats in [-1, 1] or 16-bit integers. Returns false when
   * more than a second of input waits for the pipeline (slow down, as with a stream's `write`).
   * A block holding NaN or ±Infinity is refused whole (BadInputError naming the first such
   * sample's offset in the block): nothing of it is queued, and the conversation goes on.
   */
  write(samples: Float32Array | Int16Array): boolean {
    return this.#enqueue(fromSamples(samples));
  }

  /**
   * Queues what the microphone heard (`mic`) beside what was played at the same device time
   * (`far`, resampled to `inputRate`), for a conversation opened with `echoDelayMs`: the capture
   * stage cancels the echo of `far` from `mic`. Floats, equal lengths; both are copied.
   */
  writeDuplex(mic: Float32Array, far: Float32Array): boolean {
    if (!(mic instanceof Float32Array) || !(far instanceof Float32Array) || mic.length !== far.length)
      throw new ArgumentError('writeDuplex takes two Float32Arrays of equal length (microphone, far end)');
    if (!this.#pc.echo) throw new ArgumentError(`conversation ${this.index} was opened without echoDelayMs: write() the microphone alone`);
    checkFinite(mic, 'mic');
    checkFinite(far, 'far');
    const block = new Float32Array(2 * mic.length);
    block.set(mic);
    block.set(far, mic.length);
    return this.#enqueue(block, true);
  }

  #enqueue(f: Float32Array, pair = false): boolean {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#link !== null) throw new ArgumentError(`conversation ${this.index} runs on a device: its microphone is the input`);
    if (f.length > 0) {
      this.#queue.push(f, pair);
      this.#queuedThisTurn += f.length;
      this.#host.wake();
    }
    return this.#queue.backlog() <= this.inputRate;
  }

  /**
   * Queues user speech as little-endian bytes in the conversation's `format`: whole samples
   * only (ArgumentError otherwise). Decoded straight into the queued block: one copy.
   */
  writeBytes(bytes: Uint8Array): boolean {
    return this.#enqueue(fromBytes(bytes, this.format));
  }

  /** Ends the user's turn: the reply follows. A turn with no speech is ignored. */
  endTurn(): void {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#queuedThisTurn === 0) return;
    if (this.#flush !== null) {
      // VAD mode: silence ends the speech in progress, as it would live.
      this.#queue.push(this.#flush);
      this.#queuedThisTurn = 0;
      this.#host.wake();
      return;
    }
    this.#queue.push(null);
    this.#queuedThisTurn = 0;
    this.#host.wake();
  }

  /** Resolves with the next turn's summary when its reply has been played out. */
  nextTurn(): Promise<TurnSummary> {
    if (this.#closing !== null) return Promise.reject(new ClosedError(`conversation ${this.index} is closed`));
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /**
   * The conversation as a Duplex stream: write PCM bytes (`format`, little-endian, mono, at
   * `inputRate`); read the replies' PCM bytes (`format`, at `outputRate`). Ending the writable
   * side ends the turn; the readable side ends after that turn's reply.
   */
  stream(): Duplex {
    if (this.#stream !== null) return this.#stream;
    const s = sampleStream(this.format, {
      write: (bytes) => this.writeBytes(bytes),
      drained: (done) => this.#whenDrained(done),
      end: () => {
        this.#streamEndPending = true;
        this.endTurn();
        this.#endStreamIfDone();
      },
      read: () => {
        if (!this.#outputPaused) return;
        this.#outputPaused = false;
        this.#host.wake();
      },
      destroyed: () => {
        if (this.#stream === s) this.#stream = null;
      },
    });
    this.#stream = s;
    return s;
  }

  /**
   * Resolves when at most a second of input waits for the pipeline again (at once if it does
   * now): after a `write` that returned false, write more only then. Resolves at close too.
   */
  drained(): Promise<void> {
    if (this.#closing !== null) return Promise.resolve();
    return new Promise((resolve) => this.#whenDrained(resolve));
  }

  /**
   * Holds the reply back: no more `audio` events until `resumeOutput()`. The reply waits in the
   * pipeline's rings, which stall the stages that make it (a consumer that cannot keep up, such
   * as a socket whose client does not read, holds nothing on this thread).
   */
  pauseOutput(): void {
    this.#outputPaused = true;
  }

  /** Lets the held reply flow again (see `pauseOutput`). */
  resumeOutput(): void {
    if (!this.#outputPaused) return;
    this.#outputPaused = false;
    this.#host.wake();
  }

  /** True while the reply is held back (`pauseOutput`, or the stream's reader is full). */
  get outputPaused(): boolean {
    return this.#outputPaused;
  }

  /** Every event in order, until the conversation closes. */
  events(): AsyncIterableIterator<ConversationEvent> {
    return this.#iterators.open(this.#closing !== null);
  }

  /** Drops the queued input not yet in the pipeline (and a turn's end after it); returns the samples dropped. */
  clearInput(): number {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    const dropped = this.#queue.backlog();
    // What this turn had queued, less what is dropped: a turn some of whose speech reached the
    // pipeline can still be ended.
    this.#queuedThisTurn = Math.max(0, this.#queuedThisTurn - this.#queue.clear());
    for (const cb of this.#drainCallbacks.splice(0)) cb();
    return dropped;
  }

  /**
   * Stops the reply in progress, the conversation open: generation ends at its next step, the
   * undelivered audio is dropped, `stop` is 'interrupted'. False when no reply is owed.
   */
  cancelReply(): boolean {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#port.replied >= this.#spoken) return false;
    this.#port.cancelReply();
    this.#host.wake();
    return true;
  }

  /** `await using conversation = await engine.open(…)`: closes it at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Ends the conversation (a reply in progress stops) and returns its bytes to the cap. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      try {
        await this.#host.release(this, this.#pc);
      } finally {
        this.#end(new ClosedError(`conversation ${this.index} closed`));
      }
    })();
    return this.#closing;
  }

  /** @internal */
  abortOn(signal: AbortSignal): void {
    const onAbort = (): void => {
      const e = aborted(signal, `conversation ${this.index}`);
      this.#rejectWaiters(e);
      this.#stream?.destroy(e);
      void this.close();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.once('close', () => signal.removeEventListener('abort', onAbort));
  }

  /** @internal The manifest at open, once the application could have listened. */
  emitMemory(): void {
    setImmediate(() => this.#closing === null && this.#memory(0));
  }

  #memory(turn: number): void {
    if (this.listenerCount('memory') > 0 || this.#iterators.listening) this.#emit('memory', { turn, manifest: this.#host.memory() });
  }

  /** The turn in progress: the reply owed, else the user's next. */
  #turnNow(): number {
    return Math.min(this.#port.replied, this.#spoken);
  }

  /** @internal A stage worker failed: the conversation ends with the error. */
  [kFail](error: WorkerError): void {
    if (this.#closing !== null) return;
    const info = { turn: this.#turnNow() };
    // Whoever receives it: a listener, an iterator, a nextTurn() waiter, the stream (whose own
    // 'error' follows Node's rule), a device run (which rejects with it).
    const received = this.listenerCount('error') > 0 || this.#iterators.listening || this.#waiters.length > 0 || this.#stream !== null || this.#link !== null;
    this.#emit('error', error, info);
    this.#rejectWaiters(error);
    this.#stream?.destroy(error);
    void this.close();
    // As Node's emitters do, an error nobody receives is thrown (emit with no listener throws it).
    if (!received) process.nextTick(() => this.emit('error', error, info));
  }

  #end(reason: Error): void {
    this.#rejectWaiters(reason);
    // Writers waiting for room go on (their next write is refused as closed).
    for (const cb of this.#drainCallbacks.splice(0)) cb();
    if (this.#stream !== null && !this.#stream.destroyed) this.#stream.push(null);
    this.#iterators.end();
    this.emit('close', { turn: this.#turnNow() });
  }

  #rejectWaiters(e: Error): void {
    for (const w of this.#waiters.splice(0)) w.reject(e);
  }

  #emit<K extends keyof ConversationEvents>(type: K, ...args: ConversationEvents[K]): void {
    // An 'error' goes to the emitter only when it has a listener ([kFail] throws it otherwise).
    if (type !== 'error' || this.listenerCount('error') > 0) this.emit(type, ...(args as never));
    if (this.#iterators.listening) {
      const payload = args[0] as object | undefined;
      const event = type === 'error' ? { type, error: payload, ...(args[1] as object) } : { type, ...(payload ?? {}) };
      this.#iterators.push(event as unknown as ConversationEvent);
    }
  }

  #drainCallbacks: (() => void)[] = [];

  #whenDrained(done: () => void): void {
    if (this.#queue.backlog() <= this.inputRate) done();
    else this.#drainCallbacks.push(done);
  }

  /** A token of the reply: its text so far, and what it added. */
  #textToken(token: number): void {
    this.#tokens.push(token);
    const text = this.#host.pipeline.tokenizer.decode(this.#tokens);
    const delta = text.startsWith(this.#text) ? text.slice(this.#text.length) : text;
    this.#text = text;
    this.#emit('text', { turn: this.#port.replied, token, delta, text });
  }

  /** The verdict on a speech onset (VAD mode): a reply cut keeps the text the context kept. */
  #bargeIn(v: BargeVerdict): void {
    const link = this.#link;
    if (link !== null && v.reply === this.#port.replied) {
      // What the device had not played of the cut reply is gone too.
      link.carryAt = link.carryLength;
      link.fader.silence();
    }
    if (v.frames >= 0 && this.#tokens.length > v.textTokens) {
      this.#tokens = this.#tokens.slice(0, v.textTokens);
      this.#text = this.#host.pipeline.tokenizer.decode(this.#tokens);
    }
    this.#emit('barge_in', { turn: v.reply, heardFrames: v.frames >= 0 ? v.frames : null, generatedFrames: v.generated, text: this.#text });
  }

  /** @internal One pass of the pump: input in, events and audio out. */
  [kPump](): boolean {
    if (this.#closing !== null) return false;
    const pc = this.#pc;
    let progress = false;
    if (pc.vad && this.#port.answerOnsets()) progress = true;
    const link = this.#link;
    if (link !== null && link.backlogCount > 0 && flushBacklog(this.#device, link)) progress = true;
    // Input, up to the ring's room; a turn ends at endTurn() or at the longest segment (in VAD
    // mode, where the frontend's endpointer says).
    while (this.#flush !== null && this.#queue.length > 0 && this.#feed(pc.chunk)) progress = true;
    while (this.#flush === null && this.#queue.length > 0) {
      const head = this.#queue.head();
      if (head === null) {
        if (!this.#port.endSegment()) break;
        this.#queue.shift();
        this.#endTurnFed('end-turn');
        progress = true;
        continue;
      }
      if (this.#fedThisTurn === 0 && !this.#inTurn) {
        this.#inTurn = true;
        this.#emit('speech_start', { turn: this.#spoken });
      }
      const room = this.#maxTurnSamples - this.#fedThisTurn;
      if (room === 0) {
        if (!this.#port.endSegment()) break;
        this.#endTurnFed('segment-limit');
        progress = true;
        continue;
      }
      if (!this.#feed(Math.min(pc.chunk, room))) break;
      progress = true;
    }
    if (this.#drainCallbacks.length > 0 && this.#queue.backlog() <= this.inputRate) for (const cb of this.#drainCallbacks.splice(0)) cb();
    if (this.#port.events()) progress = true;
    // A device pulls the reply audio itself, period by period (#pull).
    if (this.#link === null && this.#output()) progress = true;
    return progress;
  }

  /**
   * Reply audio to the application, unless the stream's reader is behind (the rings then hold
   * the reply back), or (VAD) the user may be speaking over it; a reply cut by a barge-in is dropped.
   */
  #output(): boolean {
    const port = this.#port;
    let progress = false;
    const hold = port.held();
    for (;;) {
      if (port.peekOutput() < 0 || (!port.dropping && (hold || this.#outputPaused))) break;
      const n = port.readOutput(this.#pcm);
      progress = true;
      if (n === OUT_REPLY_END) this.#replyEnd();
      if (n <= 0) continue;
      port.heard(n);
      const pcm = this.#audio(this.#pcm.slice(0, n));
      if (this.#stream !== null && !this.#stream.push(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength))) this.#outputPaused = true;
    }
    return progress;
  }

  /** A block of reply audio out of the rings: counted, and emitted in the conversation's format. */
  #audio(pcm: Float32Array): Float32Array | Int16Array {
    if (this.#firstAudioAt < 0) this.#firstAudioAt = performance.now();
    this.#samples += pcm.length;
    const out = this.format === 'f32' ? pcm : toS16(pcm, pcm.length);
    this.#emit('audio', { turn: this.#port.replied, pcm: out, sampleRate: this.outputRate });
    return out;
  }

  /** The reply's end came out of the output ring: the turn is over, the next reply's count starts. */
  #replyEnd(): void {
    this.#turnEnd();
    this.#port.endReply();
  }

  /** What the device driver reaches of this conversation. */
  readonly #device: DeviceHost;

  /**
   * Runs the conversation on a duplex device (io/loopback.ts, io/devices.ts), one device period
   * at a time: the reply is played as the device asks for it (held, with a fade, while the user
   * may be speaking; what was played is what the listener heard), and what the microphone heard
   * goes into the pipeline beside what was played, for echo cancellation.
   *
   * The conversation must find its own turns with echo cancellation (`vad: true`, `echoDelayMs`),
   * listen at the device's rate, and the engine must speak at it. A device with `start` (a real
   * one) runs on its own clock; one without (the loopback device) runs in lockstep with the
   * pipeline: each period waits until every stage has done all it can, so a run is repeatable
   * byte for byte and faster than real time. Resolves after `seconds` of device time, or when
   * `signal` aborts or `until` says so.
   */
  async run(
    device: DuplexDevice & Partial<ClockedDevice> & { stop?(): Promise<void> },
    o: { seconds: number; signal?: AbortSignal; until?: (link: DeviceLink) => boolean; fadeMs?: number },
  ): Promise<DeviceLink> {
    if (!(o.seconds > 0)) throw new ArgumentError(`run: seconds must be positive, got ${o.seconds}`);
    const { host, link } = this[kAttach](device, o.fadeMs);
    const end = device.clock + Math.round(o.seconds * device.rate);
    const done = (): boolean => device.clock >= end || o.signal?.aborted === true || this.#closing !== null || (o.until?.(link) ?? false);
    try {
      await driveDevice(host, device, link, done, o.signal);
    } finally {
      // A device library that never confirms its stop does not hold the conversation.
      if (device.stop !== undefined) await Promise.race([device.stop(), new Promise<void>((resolve) => setTimeout(resolve, 2000).unref())]);
      this[kDetach]();
    }
    return link;
  }

  /** @internal Checks that `device` suits this conversation and attaches a new link to it (`kDetach` ends it). */
  [kAttach](device: DuplexDevice, fadeMs = FADE_MS): { host: DeviceHost; link: DeviceLink } {
    const pc = this.#pc;
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#link !== null) throw new ArgumentError(`conversation ${this.index} already runs on a device`);
    if (!pc.vad || !pc.echo) throw new ArgumentError('a conversation on a device is opened with vad: true and echoDelayMs');
    if (device.rate !== this.inputRate || device.rate !== this.outputRate)
      throw new ArgumentError(
        `the device runs at ${device.rate} Hz; the conversation listens at ${this.inputRate} Hz and the engine speaks at ${this.outputRate} Hz`,
      );
    checkFadeMs(fadeMs);
    if (2 * device.period > pc.input.maxPayload) throw new ArgumentError(`a device period of ${device.period} samples is more than the capture ring takes`);
    const link = deviceLink(device, this.#port, fadeMs);
    this.#link = link;
    return { host: this.#device, link };
  }

  /** @internal */
  [kDetach](): void {
    this.#link = null;
  }

  /** The device this conversation runs on (`run`) and its counters, or null. */
  get device(): DeviceLink | null {
    return this.#link;
  }

  /** Up to `most` samples of the queue's head into the ring; false when it is full. */
  #feed(most: number): boolean {
    const n = this.#queue.feed(this.#port, most);
    this.#fedThisTurn += n;
    return n > 0;
  }

  #endTurnFed(reason: 'end-turn' | 'segment-limit' | 'vad'): void {
    this.#emit('speech_end', { turn: this.#spoken, samples: this.#fedThisTurn, reason });
    this.#spoken++;
    this.#fedThisTurn = 0;
    this.#inTurn = false;
    this.#endedAt.push(performance.now());
  }

  /** A stream whose writable side ended ends its readable side after the last reply. */
  #endStreamIfDone(): void {
    if (!this.#streamEndPending || this.#queue.length > 0 || this.#inTurn || this.#endedAt.length > 0) return;
    this.#streamEndPending = false;
    this.#stream?.push(null);
  }

  #turnEnd(): void {
    const f = readTurnFields(this.#port.summary);
    const endedAt = this.#endedAt.shift() ?? performance.now();
    const t: TurnSummary = {
      turn: this.#port.replied,
      text: this.#text,
      tokens: this.#tokens,
      frames: f.frames,
      samples: this.#samples,
      stop: f.stop,
      endOfAudio: f.endOfAudio,
      userFrames: f.userFrames,
      positions: f.positions,
      compactions: f.compactions,
      droppedPositions: f.droppedPositions,
      firstAudioMs: this.#firstAudioAt < 0 ? null : Math.round((this.#firstAudioAt - endedAt) * 1000) / 1000,
    };
    this.#tokens = [];
    this.#text = '';
    this.#samples = 0;
    this.#firstAudioAt = -1;
    this.#emit('turn_end', t);
    this.#memory(t.turn);
    this.#waiters.shift()?.resolve(t);
    this.#endStreamIfDone();
  }
}

export type { ConversationEvent, ConversationEvents, ConversationOptions, ConversationSettings, SampleFormat, TurnSummary } from './types.js';

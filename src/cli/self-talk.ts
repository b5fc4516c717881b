/**
 * The audio-only self-conversation (`voxslab talk --self N`): two conversations of one engine
 * on a pair of loopback devices in two rooms. A hears the opening line, then each one's
 * microphone hears the other's speaker a period later beside its own echo, so a reply reaches
 * the other conversation only as sound. The engine drives both devices in one lockstep.
 */
import { createHash } from 'node:crypto';
import type { Conversation, Engine } from '../api/engine.js';
import { LoopbackDevice } from '../io/loopback.js';

/** Something a side did, at its device clock: began or ended hearing a turn, was interrupted, replied. */
export interface SelfEvent {
  side: 'A' | 'B';
  kind: 'hears' | 'heard' | 'interrupted' | 'replied';
  clock: number;
  turn: number;
  /** heard: the endpoint's reason; replied: how the reply stopped. */
  detail?: string;
  /** replied: its frames and text tokens. */
  frames?: number;
  tokens?: readonly number[];
}

export interface SelfOptions {
  rate: number;
  opener: Float32Array;
  /** A's seed; B's is the next. */
  seed: number;
  /** Stop once this many replies have ended and nobody is speaking. */
  exchanges: number;
  seconds: number;
  /** The line between the rooms (0 cuts it). Default 1. */
  gain?: number;
  signal?: AbortSignal;
  event?(e: SelfEvent): void;
  /** Each period a side's device played. */
  played?(side: number, out: Float32Array): void;
}

export interface SelfResult {
  conversations: [Conversation, Conversation];
  seconds: number;
  turns: number;
  replies: number;
  bargeIns: number;
  underruns: number;
  /** SHA-256 of what each side played. */
  sha256: [string, string];
}

const ROOMS = [
  { delayMs: 60, gain: 0.5, seed: 1 },
  { delayMs: 40, gain: 0.5, seed: 2 },
] as const;

/** Runs the self-conversation; the conversations stay open for the caller to close. */
export async function selfConversation(engine: Engine, o: SelfOptions): Promise<SelfResult> {
  const { rate } = o;
  const devices = LoopbackDevice.pair({ rate, echo: ROOMS[0], user: o.opener }, { rate, echo: ROOMS[1] }, o.gain ?? 1);
  const conversations: [Conversation, Conversation] = [
    await engine.open({ inputRate: rate, seed: o.seed, vad: true, echoDelayMs: ROOMS[0].delayMs }),
    await engine.open({ inputRate: rate, seed: o.seed + 1, vad: true, echoDelayMs: ROOMS[1].delayMs }),
  ];
  const hashes = [createHash('sha256'), createHash('sha256')];
  const count = { turns: 0, replies: 0, bargeIns: 0, speaking: 0 };
  for (const [k, conv] of conversations.entries()) {
    const side = k === 0 ? 'A' : 'B';
    const device = devices[k]!;
    const tick = device.tick.bind(device);
    device.tick = (out, mic, far) => {
      hashes[k]!.update(new Uint8Array(out.buffer, out.byteOffset, device.period * 4));
      o.played?.(k, out);
      tick(out, mic, far);
    };
    const tokens: number[] = [];
    conv.on('speech_start', (e) => {
      count.speaking++;
      o.event?.({ side, kind: 'hears', clock: device.clock, turn: e.turn });
    });
    conv.on('speech_end', (e) => {
      count.speaking--;
      if (e.reason !== 'dropped') count.turns++;
      o.event?.({ side, kind: 'heard', clock: device.clock, turn: e.turn, detail: e.reason });
    });
    conv.on('barge_in', (e) => {
      count.bargeIns++;
      o.event?.({ side, kind: 'interrupted', clock: device.clock, turn: e.turn });
    });
    conv.on('text', (e) => tokens.push(e.token));
    conv.on('turn_end', (e) => {
      count.replies++;
      o.event?.({ side, kind: 'replied', clock: device.clock, turn: e.turn, detail: e.stop, frames: e.frames, tokens: tokens.slice() });
      tokens.length = 0;
    });
  }
  const links = await engine.runTogether(
    conversations.map((conversation, k) => ({ conversation, device: devices[k]! })),
    {
      seconds: o.seconds,
      ...(o.signal === undefined ? {} : { signal: o.signal }),
      until: () => count.replies >= o.exchanges && count.speaking === 0,
    },
  );
  return {
    conversations,
    seconds: devices[0].clock / rate,
    turns: count.turns,
    replies: count.replies,
    bargeIns: count.bargeIns,
    underruns: links.reduce((s, l) => s + l.underruns, 0),
    sha256: [hashes[0]!.digest('hex'), hashes[1]!.digest('hex')],
  };
}

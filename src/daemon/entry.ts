/**
 * One conversation as the daemon lists it: its id (the daemon's, not the engine's index), its
 * socket, and what the live page shows of it (state, turns, the last first-audio latency,
 * barge-ins, input level), kept up to date from the conversation's events.
 *
 * Thread contract: the main thread.
 */
import type { WebSocket } from 'ws';
import type { Conversation, SampleFormat } from '../api/engine.js';

export interface Entry {
  id: string;
  conversation: Conversation;
  format: SampleFormat;
  createdAt: string;
  turns: number;
  socket: WebSocket | null;
  /** Closed with the socket (opened by `/v1/ws`). */
  ephemeral: boolean;
  /** The user speaking, a reply owed, or neither. */
  state: 'listening' | 'speaking' | 'replying';
  bargeIns: number;
  /** The last turn's first reply sample after the end of speech, ms. */
  firstAudioMs: number | null;
  /** The loudest sample of the last block received (0..1). */
  inputPeak: number;
}

/** A new entry for `conversation`, its state following the conversation's events. */
export function newEntry(conversation: Conversation, id: string, format: SampleFormat, ephemeral: boolean): Entry {
  const e: Entry = {
    id,
    conversation,
    format,
    createdAt: new Date().toISOString(),
    turns: 0,
    socket: null,
    ephemeral,
    state: 'listening',
    bargeIns: 0,
    firstAudioMs: null,
    inputPeak: 0,
  };
  conversation.on('speech_start', () => {
    e.state = 'speaking';
  });
  conversation.on('speech_end', (s) => {
    e.state = s.reason === 'dropped' ? 'listening' : 'replying';
  });
  conversation.on('turn_end', (t) => {
    e.turns++;
    e.firstAudioMs = t.firstAudioMs;
    if (e.state === 'replying') e.state = 'listening';
  });
  conversation.on('barge_in', () => {
    e.bargeIns++;
  });
  return e;
}

/** The entry as `/v1/conversations` lists it. */
export function describeEntry(e: Entry): Record<string, unknown> {
  const c = e.conversation;
  return {
    id: e.id,
    // The engine's index for it: what /metrics labels its rings with.
    index: c.index,
    inputRate: c.inputRate,
    outputRate: c.outputRate,
    format: e.format,
    createdAt: e.createdAt,
    turns: e.turns,
    state: e.state,
    bargeIns: e.bargeIns,
    firstAudioMs: e.firstAudioMs,
    inputPeak: Math.round(1000 * e.inputPeak) / 1000,
    connected: e.socket !== null,
    ws: `/v1/conversations/${e.id}/ws`,
  };
}

/** The loudest sample of little-endian PCM in `format`, 0..1 (the live page's input level). */
export function peakOf(b: Buffer, format: SampleFormat): number {
  let peak = 0;
  if (format === 's16') for (let i = 0; i + 1 < b.length; i += 2) peak = Math.max(peak, Math.abs(b.readInt16LE(i)) / 32768);
  else for (let i = 0; i + 3 < b.length; i += 4) peak = Math.max(peak, Math.abs(b.readFloatLE(i)));
  return Math.min(1, peak);
}

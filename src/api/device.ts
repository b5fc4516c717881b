/**
 * A conversation on a duplex device (Conversation.run), one device period at a time: the reply
 * is played as the device asks for it (held with a fade while the user may be speaking; what was
 * played is what the listener heard), and what the microphone heard goes into the pipeline
 * beside what was played, for echo cancellation.
 *
 * Thread contract: the main thread; a period's work allocates only the reply blocks it hands
 * the application.
 */
import type { DuplexDevice } from '../core/session.js';
import { Fader } from '../duplex/fader.js';
import { runPeriods, type ClockedDevice } from '../io/devices.js';
import type { Pipeline } from '../runtime/coordinator.js';
import { OUT_DROPPED, OUT_NONE, OUT_OTHER, OUT_REPLY_END, type ConversationPort } from '../runtime/port.js';

/** A conversation's run on a duplex device: its counters and buffers. */
export interface DeviceLink {
  /** Device samples so far (the device clock), and reply samples played. */
  clock: number;
  played: number;
  /** Periods with a reply owed but no audio yet, and microphone periods lost (the pipeline two seconds behind). */
  underruns: number;
  overruns: number;
  /** The loudest microphone sample of the last period (a level meter's input). */
  inputPeak: number;
  /** Playback held (fading out or silent) because the user may be speaking. */
  paused: boolean;
  /** @internal The driver's period buffers. */
  readonly buffers: { played: Float32Array; mic: Float32Array; far: Float32Array; backlog: Float32Array; carry: Float32Array };
  /** @internal */
  carryAt: number;
  /** @internal */
  carryLength: number;
  /** @internal Periods waiting for room in the capture ring (at most two seconds). */
  backlogHead: number;
  /** @internal */
  backlogCount: number;
  /** @internal Playback's gain, fading out while the user may be speaking. */
  readonly fader: Fader;
}

/** What the device driver needs of the conversation it runs. */
export interface DeviceHost {
  readonly port: ConversationPort;
  readonly pipeline: Pipeline;
  /** One pass of the conversation's pump; true if anything moved. */
  pump(): boolean;
  /** A block of reply audio left the rings (the array is the application's). */
  audio(pcm: Float32Array): void;
  /** A reply's end left the rings. */
  replyEnd(): void;
  /** `n` microphone samples went into the pipeline. */
  fed(n: number): void;
  /** A reply is owed: the user's turn ended and its reply has not ended. */
  owed(): boolean;
  wake(): void;
}

/** A link for `device`, its buffers sized by its period. */
export function deviceLink(device: DuplexDevice, port: ConversationPort, fadeMs: number): DeviceLink {
  const n = device.period;
  return {
    clock: 0,
    played: 0,
    underruns: 0,
    overruns: 0,
    inputPeak: 0,
    paused: false,
    buffers: {
      played: new Float32Array(n),
      mic: new Float32Array(n),
      far: new Float32Array(n),
      backlog: new Float32Array(Math.max(1, Math.ceil((2 * device.rate) / n)) * 2 * n),
      carry: new Float32Array(port.conv.output.maxPayload),
    },
    carryAt: 0,
    carryLength: 0,
    backlogHead: 0,
    backlogCount: 0,
    fader: new Fader(fadeMs, device.rate),
  };
}

/**
 * Runs `link` on `device` until `done()`. A device with `start` (a real one) runs on its own
 * clock; one without (the loopback device) runs in lockstep with the pipeline: each period waits
 * until every stage has done all it can, so a run is repeatable byte for byte and faster than
 * real time.
 */
export async function driveDevice(
  host: DeviceHost,
  device: DuplexDevice & Partial<ClockedDevice>,
  link: DeviceLink,
  done: () => boolean,
  signal?: AbortSignal,
): Promise<void> {
  if (device.start === undefined) return driveTogether([{ host, device, link }], done);
  await runPeriods(
    device as ClockedDevice,
    () => {
      tick(host, device, link);
      host.wake();
      return done();
    },
    signal,
  );
}

/**
 * Several conversations of one pipeline on lockstep devices: each period waits until every
 * stage and every conversation has done all it can, then the devices tick in the order given.
 */
export async function driveTogether(members: readonly { host: DeviceHost; device: DuplexDevice; link: DeviceLink }[], done: () => boolean): Promise<void> {
  const hosts = members.map((m) => m.host);
  while (!done()) {
    await settle(hosts);
    for (const m of members) tick(m.host, m.device, m.link);
  }
}

/** Lockstep: returns once this thread and every stage have nothing left to do for `hosts` (one pipeline's). */
async function settle(hosts: readonly DeviceHost[]): Promise<void> {
  const p = hosts[0]!.pipeline;
  const pump = (): boolean => {
    let moved = false;
    for (const h of hosts) if (h.pump()) moved = true;
    return moved;
  };
  for (let spins = 0; ; spins++) {
    if (p.failure !== null) throw p.failure;
    if (!pump() && p.quiet() && !pump()) return;
    if (spins % 64 === 63) await new Promise<void>((resolve) => setTimeout(resolve, 1));
    else await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** One device period: play, capture, and hand [microphone | far end] to the capture stage. */
function tick(host: DeviceHost, device: DuplexDevice, link: DeviceLink): void {
  const b = link.buffers;
  const n = device.period;
  pull(host, link, b.played, n);
  device.tick(b.played, b.mic, b.far);
  let peak = 0;
  // Into the backlog ([periods][2][n], a ring): a device does not wait for the pipeline.
  const q = b.backlog;
  const slots = q.length / (2 * n);
  if (link.backlogCount === slots) {
    // Two seconds behind: the oldest period is lost (counted).
    link.backlogHead = (link.backlogHead + 1) % slots;
    link.backlogCount--;
    link.overruns++;
  }
  const at = ((link.backlogHead + link.backlogCount) % slots) * 2 * n;
  for (let i = 0; i < n; i++) {
    peak = Math.max(peak, Math.abs(b.mic[i]!));
    q[at + i] = b.mic[i]!;
    q[at + n + i] = b.far[i]!;
  }
  link.backlogCount++;
  link.inputPeak = peak;
  link.clock = device.clock;
  flushBacklog(host, link);
}

/** Periods waiting for the capture ring go in, oldest first, as it has room. */
export function flushBacklog(host: DeviceHost, link: DeviceLink): boolean {
  const q = link.buffers.backlog;
  const n = link.buffers.mic.length;
  const slots = q.length / (2 * n);
  let moved = false;
  while (link.backlogCount > 0 && host.port.writeDuplex(q, link.backlogHead * 2 * n, 2 * n)) {
    link.backlogHead = (link.backlogHead + 1) % slots;
    link.backlogCount--;
    host.fed(n);
    moved = true;
  }
  return moved;
}

/** The next `n` samples of reply audio for the device, through the hold fade. */
function pull(host: DeviceHost, link: DeviceLink, out: Float32Array, n: number): void {
  const port = host.port;
  const hold = port.held();
  const carry = link.buffers.carry;
  let played = 0;
  let starved = false;
  link.paused = hold;
  // A reply cut by a barge-in is dropped at once, held or not.
  while (port.dropping) {
    const r = port.readOutput(carry);
    if (r === OUT_NONE) break;
    if (r === OUT_REPLY_END) host.replyEnd();
  }
  for (let i = 0; i < n; i++) {
    link.fader.step(hold);
    out[i] = 0;
    if (!link.fader.audible(hold)) continue;
    while (link.carryAt === link.carryLength) {
      const r = port.readOutput(carry);
      if (r === OUT_NONE) break;
      if (r === OUT_DROPPED || r === OUT_OTHER) continue;
      if (r === OUT_REPLY_END) {
        if (played > 0) port.heard(played);
        played = 0;
        host.replyEnd();
        continue;
      }
      link.carryLength = r;
      link.carryAt = 0;
      host.audio(carry.slice(0, r));
    }
    if (link.carryAt === link.carryLength) {
      starved ||= host.owed() && !hold;
      continue;
    }
    out[i] = link.fader.gain * carry[link.carryAt++]!;
    played++;
    link.played++;
  }
  if (played > 0) port.heard(played);
  if (starved) link.underruns++;
}

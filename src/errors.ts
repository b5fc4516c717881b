/**
 * The one catalogue of voxslab error classes. Every error voxslab throws is a `VoxslabError`
 * with a stable `code` and the process exit status the CLI maps it to (0 ok, 1 internal fault,
 * 2 usage, 3 memory limit, 4 bad input). This module imports nothing, so every layer may use it.
 */

export interface ErrorOptions {
  cause?: unknown;
}

export class VoxslabError extends Error {
  readonly code: string = 'ERR_VOXSLAB';
  readonly exitCode: number = 1;
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A broken invariant inside voxslab: a bug, never the caller's fault. Exit code 1. */
export class InternalError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_INTERNAL';
}

/** A caller passed a value of the wrong type or out of range. Exit code 2. */
export class ArgumentError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_ARGUMENT';
  override readonly exitCode = 2;
}

/** The command line was used wrongly. Exit code 2. */
export class UsageError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_USAGE';
  override readonly exitCode = 2;
}

/** A reservation would take the process past its memory cap. Exit code 3. */
export class MemoryLimitError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_MEMORY_LIMIT';
  override readonly exitCode = 3;
  readonly requested: number;
  readonly inUse: number;
  readonly limit: number;
  readonly owner: string;
  /** What the bytes were for (a slab's or arena's name), when the caller said. */
  readonly site: string | undefined;
  constructor(requested: number, inUse: number, limit: number, owner: string, site?: string) {
    const what = site === undefined ? '' : ` (${site})`;
    super(`memory limit refused ${requested} bytes for owner '${owner}'${what}: ${inUse} bytes in use (held + reserved) of a ${limit}-byte limit`);
    this.site = site;
    this.requested = requested;
    this.inUse = inUse;
    this.limit = limit;
    this.owner = owner;
  }
}

/**
 * Admission refused a conversation for a fixed limit other than bytes (the ledger's owner table,
 * the Depthformer stage's conversation table), before anything was carved. Exit code 3, as for
 * the cap: try again when a conversation has closed.
 */
export class CapacityError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_CAPACITY';
  override readonly exitCode = 3;
}

/** The allocator (or page locking) failed after a reservation; the reservation was refunded. */
export class AllocationError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_ALLOCATION';
  override readonly exitCode = 3;
}

/** An allocation or carve was attempted after readiness (seal). It was refused and counted. */
export class ReadinessError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_AFTER_READINESS';
}

/** A red zone or canary was overwritten. */
export class CorruptionError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_CORRUPTION';
}

/** Shared accounting could not be read or written (e.g. a lock held by a dead thread). */
export class SharedStateError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_SHARED_STATE';
}

/** Input data (a file, a field, an environment variable) is malformed. Exit code 4. */
export class BadInputError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_BAD_INPUT';
  override readonly exitCode = 4;
  readonly file: string | undefined;
  readonly field: string | undefined;
  readonly offset: number | undefined;
  readonly reason: string;
  constructor(where: { file?: string; field?: string; offset?: number }, reason: string, options?: ErrorOptions) {
    const parts: string[] = [];
    if (where.file !== undefined) parts.push(where.file);
    if (where.field !== undefined) parts.push(`field ${where.field}`);
    if (where.offset !== undefined) parts.push(`offset ${where.offset}`);
    super(parts.length > 0 ? `${parts.join(', ')}: ${reason}` : reason, options);
    this.file = where.file;
    this.field = where.field;
    this.offset = where.offset;
    this.reason = reason;
  }
}

/**
 * A pipeline stage's worker thread exited or failed; its conversations end with this. Exit code
 * that of its cause when the cause is a catalogue error (a cap refusal stays 3), else 1.
 */
export class WorkerError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_WORKER';
  override readonly exitCode: number;
  readonly stage: string;
  constructor(stage: string, message: string, options?: ErrorOptions) {
    super(`${stage} worker: ${message}`, options);
    this.stage = stage;
    this.exitCode = options?.cause instanceof VoxslabError ? options.cause.exitCode : 1;
  }
}

/** A control call to a worker did not answer in time. Exit code 1. */
export class ControlTimeoutError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_CONTROL_TIMEOUT';
}

/** An AbortSignal ended the operation. Exit code 1. */
export class AbortedError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_ABORTED';
}

/** The engine or conversation is closed. Exit code 2 (a caller's sequencing mistake). */
export class ClosedError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_CLOSED';
  override readonly exitCode = 2;
}

/** This build lacks an optional engine the caller asked for (echo cancellation, devices). Exit code 2. */
export class UnsupportedError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_UNSUPPORTED';
  override readonly exitCode = 2;
}

/** An audio device is missing, busy, or went away. Exit code 4. */
export class DeviceError extends VoxslabError {
  override readonly code = 'ERR_VOXSLAB_DEVICE';
  override readonly exitCode = 4;
  readonly device: string;
  constructor(device: string, reason: string, options?: ErrorOptions) {
    super(`audio device ${device}: ${reason}`, options);
    this.device = device;
  }
}

/** The exit code a CLI should use for an error thrown by voxslab. */
export function exitCodeOf(error: unknown): number {
  if (error !== null && typeof error === 'object' && 'exitCode' in error) {
    const code = (error as { exitCode: unknown }).exitCode;
    if (typeof code === 'number') return code;
  }
  return 1;
}

/** Every catalogue class by its code: how an error that crossed a thread is made whole again. */
const CATALOGUE: Readonly<Record<string, abstract new (...args: never[]) => VoxslabError>> = Object.freeze({
  ERR_VOXSLAB: VoxslabError,
  ERR_VOXSLAB_INTERNAL: InternalError,
  ERR_VOXSLAB_ARGUMENT: ArgumentError,
  ERR_VOXSLAB_USAGE: UsageError,
  ERR_VOXSLAB_MEMORY_LIMIT: MemoryLimitError,
  ERR_VOXSLAB_CAPACITY: CapacityError,
  ERR_VOXSLAB_ALLOCATION: AllocationError,
  ERR_VOXSLAB_AFTER_READINESS: ReadinessError,
  ERR_VOXSLAB_CORRUPTION: CorruptionError,
  ERR_VOXSLAB_SHARED_STATE: SharedStateError,
  ERR_VOXSLAB_BAD_INPUT: BadInputError,
  ERR_VOXSLAB_WORKER: WorkerError,
  ERR_VOXSLAB_CONTROL_TIMEOUT: ControlTimeoutError,
  ERR_VOXSLAB_ABORTED: AbortedError,
  ERR_VOXSLAB_CLOSED: ClosedError,
  ERR_VOXSLAB_UNSUPPORTED: UnsupportedError,
  ERR_VOXSLAB_DEVICE: DeviceError,
});

/**
 * A catalogue error as plain data (structured-clone safe): what a worker sends in place of the
 * error, since a thread boundary keeps only an Error's message and name.
 */
export interface ErrorRecord {
  readonly voxslabError: true;
  readonly code: string;
  readonly message: string;
  readonly stack: string;
  /** The class's own fields (owner, file, field, stage, …): numbers, strings or undefined. */
  readonly fields: Readonly<Record<string, string | number | boolean | undefined>>;
}

function isErrorRecord(value: unknown): value is ErrorRecord {
  return value !== null && typeof value === 'object' && (value as { voxslabError?: unknown }).voxslabError === true;
}

/**
 * The record of `error` when it belongs to the catalogue, or carries a catalogue code (the native
 * addon's errors do); anything else is returned as it is.
 */
export function errorRecord(error: unknown): ErrorRecord | unknown {
  if (!(error instanceof Error)) return error;
  const code = (error as { code?: unknown }).code;
  if (typeof code !== 'string' || !Object.hasOwn(CATALOGUE, code)) return error;
  const fields: Record<string, string | number | boolean | undefined> = {};
  for (const [k, v] of Object.entries(error)) {
    if (k !== 'cause' && (v === undefined || typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean')) fields[k] = v;
  }
  return { voxslabError: true, code, message: error.message, stack: error.stack ?? '', fields };
}

/**
 * The catalogue error a record (or an Error carrying a catalogue code) stands for: its class, its
 * message, its fields and the stack where it was thrown. Anything else is returned as it is.
 */
export function reviveError(value: unknown): unknown {
  let record: ErrorRecord;
  if (isErrorRecord(value)) record = value;
  else if (value instanceof Error && !(value instanceof VoxslabError)) {
    const r = errorRecord(value);
    if (!isErrorRecord(r)) return value;
    record = r;
  } else return value;
  const Class = CATALOGUE[record.code] ?? InternalError;
  // Made without running the constructor (each class formats its message from its own arguments).
  const error = Reflect.construct(Error, [record.message], Class) as VoxslabError;
  Object.defineProperty(error, 'name', { value: Class.name, writable: true, configurable: true, enumerable: false });
  for (const [k, v] of Object.entries(record.fields)) {
    if (k !== 'name' && k !== 'message' && k !== 'stack') Object.defineProperty(error, k, { value: v, writable: false, enumerable: true, configurable: true });
  }
  Object.defineProperty(error, 'code', { value: record.code, enumerable: true, configurable: true });
  // A record without one (a native error that named no exit code) is an internal fault.
  if (!Object.hasOwn(record.fields, 'exitCode')) Object.defineProperty(error, 'exitCode', { value: 1, enumerable: true, configurable: true });
  if (record.stack !== '') Object.defineProperty(error, 'stack', { value: record.stack, writable: true, configurable: true, enumerable: false });
  return error;
}

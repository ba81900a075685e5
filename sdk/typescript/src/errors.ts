// Typed errors: one class per sbxd API error code (docs/api.md, "Errors"),
// all extending SandboxerError, plus ConnectionError for a transport that
// failed before sbxd answered, and ProtocolError for an answer sbxd would
// never give (a truncated stream, a body that is not JSON).

/** The JSON body of every sbxd error. */
export interface ErrorBody {
  ok?: false;
  status?: number;
  code?: string;
  message?: string;
  requestId?: string;
  retryAfterSeconds?: number;
  [key: string]: unknown;
}

/** Any error the SDK throws. `code` is sbxd's stable code; act on it, not on `message`. */
export class SandboxerError extends Error {
  /** sbxd's error code (`not_found`, `invalid_state`, …), or `connection_error` / `protocol_error`. */
  readonly code: string;
  /** The HTTP status (0 when no response came). */
  readonly status: number;
  /** The request's id (`req_…`), when sbxd gave one. */
  readonly requestId: string | undefined;
  /** The whole error body, as sbxd sent it. */
  readonly body: ErrorBody | undefined;

  constructor(message: string, opts: { code?: string; status?: number; requestId?: string; body?: ErrorBody; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code ?? 'unknown';
    this.status = opts.status ?? 0;
    this.requestId = opts.requestId;
    this.body = opts.body;
  }
}

/** No answer from sbxd: the socket could not be reached, or the connection broke. */
export class ConnectionError extends SandboxerError {
  constructor(message: string, cause?: unknown) {
    super(message, { code: 'connection_error', cause });
  }
}

/** An answer sbxd would not give: a body that is not JSON, a stream that ended early. */
export class ProtocolError extends SandboxerError {
  constructor(message: string, opts: { status?: number; requestId?: string; cause?: unknown } = {}) {
    super(message, { code: 'protocol_error', ...opts });
  }
}

/** The options every API error class is built from. */
export interface ApiErrorInit {
  status: number;
  code: string;
  message: string;
  requestId?: string;
  body?: ErrorBody;
  retryAfter?: number;
}

function init(i: ApiErrorInit) {
  return { code: i.code, status: i.status, requestId: i.requestId, body: i.body };
}

/** An error answer of sbxd (`{"ok":false,…}`); the subclasses below name each code. */
export class ApiError extends SandboxerError {
  constructor(i: ApiErrorInit) {
    super(i.message, init(i));
  }
}

export class BadRequestError extends ApiError {}
export class InvalidArgumentError extends ApiError {}
export class UnauthorizedError extends ApiError {}
export class ForbiddenError extends ApiError {}
export class NotFoundError extends ApiError {}
export class MethodNotAllowedError extends ApiError {}
export class InvalidStateError extends ApiError {}
export class IdempotencyConflictError extends ApiError {}
export class AlreadyExistsError extends ApiError {}
export class PayloadTooLargeError extends ApiError {}
export class HeadersTooLargeError extends ApiError {}
/** 429 `rate_limited`: too many starts per minute. */
export class RateLimitedError extends ApiError {
  /** Seconds to wait before retrying (`Retry-After`), when given. */
  readonly retryAfter: number | undefined;
  constructor(i: ApiErrorInit) {
    super(i);
    this.retryAfter = i.retryAfter;
  }
}
/** 429 `limit_reached`: a concurrency limit (running sandboxes, or the agent's). */
export class LimitReachedError extends ApiError {
  readonly retryAfter: number | undefined;
  constructor(i: ApiErrorInit) {
    super(i);
    this.retryAfter = i.retryAfter;
  }
}
export class InternalError extends ApiError {}
export class NotImplementedError extends ApiError {}
export class NoReadyMachineError extends ApiError {}
export class AgentUnavailableError extends ApiError {}
export class CapacityExceededError extends ApiError {}
export class InsufficientStorageError extends ApiError {}

type ApiErrorClass = new (i: ApiErrorInit) => ApiError;

/** Each sbxd error code's class. */
export const ERROR_CLASSES: Readonly<Record<string, ApiErrorClass>> = Object.freeze({
  bad_request: BadRequestError,
  invalid_argument: InvalidArgumentError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  invalid_state: InvalidStateError,
  idempotency_conflict: IdempotencyConflictError,
  already_exists: AlreadyExistsError,
  payload_too_large: PayloadTooLargeError,
  headers_too_large: HeadersTooLargeError,
  rate_limited: RateLimitedError,
  limit_reached: LimitReachedError,
  internal: InternalError,
  not_implemented: NotImplementedError,
  no_ready_machine: NoReadyMachineError,
  agent_unavailable: AgentUnavailableError,
  capacity_exceeded: CapacityExceededError,
  insufficient_storage: InsufficientStorageError,
});

/** The class for a status with an unknown (or missing) code. */
function classForStatus(status: number): ApiErrorClass {
  switch (status) {
    case 400: return BadRequestError;
    case 401: return UnauthorizedError;
    case 403: return ForbiddenError;
    case 404: return NotFoundError;
    case 405: return MethodNotAllowedError;
    case 409: return InvalidStateError;
    case 413: return PayloadTooLargeError;
    case 429: return LimitReachedError;
    case 431: return HeadersTooLargeError;
    case 501: return NotImplementedError;
    case 502: return AgentUnavailableError;
    case 503: return CapacityExceededError;
    case 507: return InsufficientStorageError;
    default: return status >= 500 ? InternalError : ApiError;
  }
}

/** Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or undefined. */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v.trim() === '') return undefined;
  if (/^\s*\d+\s*$/.test(v)) return Number(v.trim());
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - now) / 1000));
}

/** The typed error for an sbxd error answer. */
export function errorFromResponse(status: number, body: unknown, headers: Record<string, string | string[] | undefined> = {}): ApiError {
  const b: ErrorBody = body !== null && typeof body === 'object' && !Array.isArray(body) ? (body as ErrorBody) : {};
  const code = typeof b.code === 'string' ? b.code : `http_${status}`;
  const requestIdHeader = headers['x-request-id'];
  const requestId = typeof b.requestId === 'string' ? b.requestId
    : typeof requestIdHeader === 'string' ? requestIdHeader : undefined;
  let retryAfter = parseRetryAfter(headers['retry-after']);
  if (retryAfter === undefined && typeof b.retryAfterSeconds === 'number') retryAfter = b.retryAfterSeconds;
  const message = typeof b.message === 'string' ? b.message : `HTTP ${status}`;
  const Cls = ERROR_CLASSES[code] ?? classForStatus(status);
  return new Cls({ status, code, message, requestId, body: typeof body === 'object' && body !== null ? b : undefined, retryAfter });
}

/** The typed error for an in-stream error (`{"type":"error","code","message"}`), which has no HTTP status of its own. */
export function errorFromStream(code: string, message: string, requestId?: string): ApiError {
  const status: Record<string, number> = {
    bad_request: 400, invalid_argument: 400, unauthorized: 401, forbidden: 403, not_found: 404,
    invalid_state: 409, rate_limited: 429, limit_reached: 429, internal: 500, not_implemented: 501,
    no_ready_machine: 502, agent_unavailable: 502, capacity_exceeded: 503, insufficient_storage: 507,
  };
  const Cls = ERROR_CLASSES[code] ?? ApiError;
  return new Cls({ status: status[code] ?? 0, code, message, requestId });
}

// The transport: one HTTP/1.1 request per connection to sbxd over a Unix
// socket or TCP (node:http / node:https), the API key on TCP only, typed
// errors, and retries with exponential backoff that honour Retry-After.
//
// Retry policy: an answer of 429 (rate_limited, limit_reached) or 500,
// 502, 503, 504, or a connection refused or reset before any answer, is
// retried, but only for requests safe to repeat: GET, HEAD, PUT and
// DELETE with a body that can be sent again, a POST that carries an
// Idempotency-Key (create and fork always do), or a request the caller
// marks idempotent. Other 4xx answers are never retried.
import * as http from 'node:http';
import * as https from 'node:https';
import { Readable } from 'node:stream';
import { ConnectionError, ProtocolError, SandboxerError, errorFromResponse } from './errors.js';

export const DEFAULT_HOST = 'unix:/run/sandboxer/sbxd.sock';

/** Options of a client (`new Sandboxer(opts)`). */
export interface ClientOptions {
  /** `unix:PATH` or `http(s)://HOST:PORT` (default `$SBX_HOST`, else `unix:/run/sandboxer/sbxd.sock`). */
  host?: string;
  /** The API key, sent as `Authorization: Bearer` on TCP only (default `$SBX_API_KEY`). */
  apiKey?: string;
  /** Retries after the first attempt (default 3). 0 turns retries off. */
  maxRetries?: number;
  /** The first backoff in ms (default 500); each retry doubles it, with jitter. */
  retryBaseMs?: number;
  /** The longest backoff in ms (default 30000). */
  retryMaxMs?: number;
  /** The longest Retry-After honoured, in seconds (default 120); a longer one is thrown at once. */
  maxRetryAfterSeconds?: number;
  /** Drop a connection silent for this many ms (default 0: never; VM operations may take minutes). */
  timeoutMs?: number;
  /** Extra TLS options for an https host (e.g. `ca` for sbxd's own CA). */
  tls?: https.RequestOptions;
}

/** Where requests go. */
export interface Endpoint {
  kind: 'unix' | 'http' | 'https';
  socketPath?: string;
  hostname?: string;
  port?: number;
  basePath: string;
  /** The host as given, for messages. */
  display: string;
}

/** Reads `unix:PATH`, `http://HOST:PORT`, `https://HOST:PORT`, `tcp:HOST:PORT` or a bare `/path` socket. */
export function parseHost(host: string): Endpoint {
  const h = host.trim();
  if (h.startsWith('unix:')) {
    const socketPath = h.slice(5);
    if (!socketPath) throw new SandboxerError(`bad host ${JSON.stringify(host)}: unix: needs a path`, { code: 'invalid_host' });
    return { kind: 'unix', socketPath, basePath: '', display: h };
  }
  if (h.startsWith('/')) return { kind: 'unix', socketPath: h, basePath: '', display: `unix:${h}` };
  const text = h.startsWith('tcp:') ? `http://${h.slice(4)}` : h;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new SandboxerError(`bad host ${JSON.stringify(host)}: want unix:PATH or http://HOST:PORT`, { code: 'invalid_host' });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new SandboxerError(`bad host ${JSON.stringify(host)}: want unix:PATH or http://HOST:PORT`, { code: 'invalid_host' });
  }
  const kind = url.protocol === 'https:' ? 'https' : 'http';
  const hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = url.port ? Number(url.port) : kind === 'https' ? 443 : 80;
  return { kind, hostname, port, basePath: url.pathname.replace(/\/+$/, ''), display: `${url.protocol}//${url.host}` };
}

export type QueryValue = string | number | boolean | undefined | null | readonly string[];

/** A request of the transport. */
export interface RequestSpec {
  method: 'GET' | 'HEAD' | 'POST' | 'PUT' | 'DELETE';
  /** The path below the host, e.g. `/v1/sandboxes/sbx_1` (segments already encoded). */
  path: string;
  query?: Record<string, QueryValue>;
  /** A JSON body. */
  json?: unknown;
  /** A raw body: bytes (sent again on a retry) or a stream (sent once, chunked). */
  body?: Buffer | Uint8Array | Readable | AsyncIterable<Uint8Array>;
  headers?: Record<string, string>;
  /** Sent as `Idempotency-Key`; makes a POST retryable. */
  idempotencyKey?: string;
  /** Overrides the method's own idempotency. */
  idempotent?: boolean;
  signal?: AbortSignal;
}

/** One attempt's outcome, for tests and logging hooks. */
export interface AttemptInfo {
  attempt: number;
  method: string;
  path: string;
  status?: number;
  error?: unknown;
  waitMs?: number;
}

const RETRY_STATUSES = new Set([429, 500, 502, 503, 504]);
const RETRY_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNABORTED', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
const MAX_ERROR_BODY = 1 << 20;

/** `/a/b` joined from raw segments, each percent-encoded. */
export function pathOf(...segments: Array<string | number>): string {
  return '/' + segments.map((s) => encodeURIComponent(String(s))).join('/');
}

function queryString(query: Record<string, QueryValue> | undefined): string {
  if (!query) return '';
  const parts: string[] = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    const values = Array.isArray(v) ? v : [String(v)];
    for (const one of values) parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(one)}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason ?? new Error('aborted'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason ?? new Error('aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Reads a whole (small) body; throws past `limit` bytes. */
export async function readAll(res: Readable, limit = Infinity): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  try {
    for await (const c of res) {
      const b = c as Buffer;
      n += b.length;
      if (n > limit) {
        res.destroy();
        throw new ProtocolError(`response body over ${limit} bytes`);
      }
      chunks.push(b);
    }
  } catch (e) {
    throw streamError(e);
  }
  return Buffer.concat(chunks, n);
}

/** A stream failure as the SDK's error: a body that ended early is a ProtocolError. */
export function streamError(e: unknown): SandboxerError {
  if (e instanceof SandboxerError) return e;
  const err = e as NodeJS.ErrnoException;
  if (err?.name === 'AbortError') return new ConnectionError('request aborted', e);
  if (err?.code === 'ECONNRESET' || err?.message === 'aborted') {
    return new ProtocolError('the response ended before its end (the connection broke or sbxd failed mid-way)', { cause: e });
  }
  return new ConnectionError(`stream failed: ${err?.message ?? String(e)}`, e);
}

export class Transport {
  readonly endpoint: Endpoint;
  readonly apiKey: string | undefined;
  readonly maxRetries: number;
  readonly retryBaseMs: number;
  readonly retryMaxMs: number;
  readonly maxRetryAfterSeconds: number;
  readonly timeoutMs: number;
  private readonly tls: https.RequestOptions | undefined;
  /** Called after every attempt (tests and logging). */
  onAttempt: ((info: AttemptInfo) => void) | undefined;

  constructor(opts: ClientOptions = {}) {
    const host = opts.host ?? process.env.SBX_HOST ?? DEFAULT_HOST;
    this.endpoint = parseHost(host === '' ? DEFAULT_HOST : host);
    const key = opts.apiKey ?? process.env.SBX_API_KEY;
    this.apiKey = key === '' ? undefined : key;
    this.maxRetries = opts.maxRetries ?? 3;
    this.retryBaseMs = opts.retryBaseMs ?? 500;
    this.retryMaxMs = opts.retryMaxMs ?? 30000;
    this.maxRetryAfterSeconds = opts.maxRetryAfterSeconds ?? 120;
    this.timeoutMs = opts.timeoutMs ?? 0;
    this.tls = opts.tls;
  }

  private retryable(spec: RequestSpec): boolean {
    if (spec.body !== undefined && !(spec.body instanceof Uint8Array)) return false;
    if (spec.idempotent !== undefined) return spec.idempotent;
    if (spec.idempotencyKey) return true;
    return spec.method !== 'POST';
  }

  /** The backoff before retry `attempt` (1-based), or the server's Retry-After. */
  backoffMs(attempt: number, retryAfterSeconds?: number): number {
    if (retryAfterSeconds !== undefined) return retryAfterSeconds * 1000;
    const exp = Math.min(this.retryMaxMs, this.retryBaseMs * 2 ** (attempt - 1));
    return Math.round(exp / 2 + Math.random() * (exp / 2));
  }

  /**
   * Sends a request and returns the response of a 2xx answer with its body
   * unread (the caller streams it); an error answer is thrown as its typed
   * error, after the retries the policy allows.
   */
  async send(spec: RequestSpec): Promise<http.IncomingMessage> {
    const canRetry = this.retryable(spec) && this.maxRetries > 0;
    for (let attempt = 1; ; attempt++) {
      let res: http.IncomingMessage;
      try {
        res = await this.once(spec);
      } catch (e) {
        const code = (e as SandboxerError).cause && ((e as SandboxerError).cause as NodeJS.ErrnoException).code;
        const again = canRetry && attempt <= this.maxRetries && e instanceof ConnectionError && !spec.signal?.aborted
          && typeof code === 'string' && RETRY_ERRNOS.has(code);
        const waitMs = again ? this.backoffMs(attempt) : undefined;
        this.onAttempt?.({ attempt, method: spec.method, path: spec.path, error: e, waitMs });
        if (!again) throw e;
        await sleep(waitMs!, spec.signal);
        continue;
      }
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) {
        this.onAttempt?.({ attempt, method: spec.method, path: spec.path, status });
        return res;
      }
      const raw = await readAll(res, MAX_ERROR_BODY).catch(() => Buffer.alloc(0));
      let body: unknown;
      try {
        body = raw.length ? JSON.parse(raw.toString('utf8')) : undefined;
      } catch {
        body = { message: raw.toString('utf8').slice(0, 500) };
      }
      const err = errorFromResponse(status, body, res.headers);
      const retryAfter = (err as { retryAfter?: number }).retryAfter;
      let again = canRetry && attempt <= this.maxRetries && RETRY_STATUSES.has(status) && !spec.signal?.aborted;
      if (again && retryAfter !== undefined && retryAfter > this.maxRetryAfterSeconds) again = false;
      const waitMs = again ? this.backoffMs(attempt, retryAfter) : undefined;
      this.onAttempt?.({ attempt, method: spec.method, path: spec.path, status, error: err, waitMs });
      if (!again) throw err;
      await sleep(waitMs!, spec.signal);
    }
  }

  /** Sends a request and parses its JSON answer. */
  async json<T = Record<string, unknown>>(spec: RequestSpec): Promise<T> {
    const res = await this.send(spec);
    const raw = await readAll(res);
    const requestId = res.headers['x-request-id'] as string | undefined;
    try {
      return (raw.length ? JSON.parse(raw.toString('utf8')) : {}) as T;
    } catch (e) {
      throw new ProtocolError(`${spec.method} ${spec.path}: the answer is not JSON`, { status: res.statusCode, requestId, cause: e });
    }
  }

  private once(spec: RequestSpec): Promise<http.IncomingMessage> {
    const ep = this.endpoint;
    const headers: Record<string, string> = { Accept: '*/*', ...spec.headers };
    if (ep.kind !== 'unix' && this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    if (spec.idempotencyKey) headers['Idempotency-Key'] = spec.idempotencyKey;
    let payload: Buffer | Uint8Array | undefined;
    let stream: Readable | undefined;
    if (spec.json !== undefined) {
      payload = Buffer.from(JSON.stringify(spec.json), 'utf8');
      headers['Content-Type'] = 'application/json';
    } else if (spec.body instanceof Uint8Array) {
      payload = spec.body;
      headers['Content-Type'] ??= 'application/octet-stream';
    } else if (spec.body !== undefined) {
      stream = spec.body instanceof Readable ? spec.body : Readable.from(spec.body);
      headers['Content-Type'] ??= 'application/octet-stream';
      headers['Transfer-Encoding'] = 'chunked';
    }
    if (payload) headers['Content-Length'] = String(payload.length);
    else if (!stream && (spec.method === 'POST' || spec.method === 'PUT')) headers['Content-Length'] = '0';
    const options: https.RequestOptions = {
      method: spec.method,
      path: ep.basePath + spec.path + queryString(spec.query),
      headers,
      agent: false,
      signal: spec.signal,
    };
    if (ep.kind === 'unix') {
      options.socketPath = ep.socketPath;
      headers.Host = 'sbxd';
    } else {
      options.hostname = ep.hostname;
      options.port = ep.port;
      if (ep.kind === 'https') Object.assign(options, this.tls);
    }
    const mod = ep.kind === 'https' ? https : http;
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (e: unknown) => {
        if (settled) return;
        settled = true;
        const err = e as NodeJS.ErrnoException;
        if (err?.name === 'AbortError') reject(new ConnectionError(`${spec.method} ${spec.path}: aborted`, e));
        else if (e instanceof SandboxerError) reject(e);
        else reject(new ConnectionError(`${spec.method} ${ep.display}${spec.path}: ${err?.code ?? ''} ${err?.message ?? String(e)}`.replace(/\s+/g, ' '), e));
      };
      const req = mod.request(options, (res) => {
        settled = true;
        if (this.timeoutMs > 0) {
          res.socket?.setTimeout(this.timeoutMs, () => res.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })));
        }
        resolve(res);
      });
      req.on('error', fail);
      if (this.timeoutMs > 0) {
        req.setTimeout(this.timeoutMs, () => req.destroy(Object.assign(new Error(`no answer in ${this.timeoutMs} ms`), { code: 'ETIMEDOUT' })));
      }
      if (stream) {
        stream.on('error', (e) => {
          req.destroy(e);
          fail(e);
        });
        stream.pipe(req);
      } else {
        req.end(payload);
      }
    });
  }
}

/** Splits a body into lines (without their `\n`), as they come. */
export async function* lines(res: Readable): AsyncGenerator<string> {
  let rest = '';
  const decoder = new TextDecoder('utf-8');
  try {
    for await (const chunk of res) {
      rest += decoder.decode(chunk as Buffer, { stream: true });
      let nl: number;
      while ((nl = rest.indexOf('\n')) >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        yield line.endsWith('\r') ? line.slice(0, -1) : line;
      }
    }
  } catch (e) {
    throw streamError(e);
  }
  rest += decoder.decode();
  if (rest.length) yield rest;
}

/** One server-sent event. */
export interface SseEvent {
  event: string;
  data: string;
  id: string | undefined;
}

/** Server-sent events (text/event-stream) from a body, as they come. */
export async function* sseEvents(res: Readable): AsyncGenerator<SseEvent> {
  let event = '';
  let data: string[] = [];
  let id: string | undefined;
  let any = false;
  for await (const line of lines(res)) {
    if (line === '') {
      if (any) yield { event: event || 'message', data: data.join('\n'), id };
      event = '';
      data = [];
      id = undefined;
      any = false;
      continue;
    }
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    any = true;
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  // An event without its blank line is incomplete and dropped (as EventSource does).
}

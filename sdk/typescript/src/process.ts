// A detached process (docs/api.md, `…/processes/{proc}`): its status, its
// output as server-sent events from any byte offset, its stdin, signals.
import type { Transport } from './http.js';
import { pathOf, sleep, sseEvents } from './http.js';
import { ProtocolError, errorFromStream } from './errors.js';
import type { OutputEvent, OutputResult, ProcessInfo } from './types.js';

/** The stdin route takes a body of at most 1 MiB: data goes in pieces of this size (base64 grows it by a third). */
const STDIN_PIECE = 512 * 1024;

interface RawProcess extends Omit<ProcessInfo, 'tail'> {
  tail?: string;
}

export function processInfo(raw: RawProcess): ProcessInfo {
  const { tail, ...rest } = raw;
  return tail === undefined ? rest : { ...rest, tail: Buffer.from(tail, 'base64') };
}

export interface AttachOptions {
  /** The first byte to read (default 0): a `nextOffset` from before repeats and loses nothing. */
  offset?: number;
  /** Keep reading until the process exits (default true); false ends with the output there now. */
  follow?: boolean;
  signal?: AbortSignal;
}

export class Process {
  constructor(
    private readonly transport: Transport,
    /** The sandbox's id. */
    readonly sandboxId: string,
    /** The process's id (`p…`). */
    readonly id: string,
    /** Its pid in the guest, when known. */
    readonly pid: number | null = null,
  ) {}

  private route(...rest: string[]): string {
    return pathOf('v1', 'sandboxes', this.sandboxId, 'processes', this.id, ...rest);
  }

  /** Its state, exit and the last ≤ 4 KiB of output (`tail`). */
  async status(opts: { signal?: AbortSignal } = {}): Promise<ProcessInfo> {
    const r = await this.transport.json<{ process: RawProcess }>({ method: 'GET', path: this.route(), signal: opts.signal });
    return processInfo(r.process);
  }

  /**
   * The output from byte `offset` as it comes, each chunk with its place
   * (`offset`, `nextOffset`), then `exit` (or, with `follow: false` while
   * it runs, `running`). Breaking out of the loop closes the stream; the
   * process runs on, and attaching again from the last `nextOffset`
   * repeats and loses nothing.
   */
  async *attach(opts: AttachOptions = {}): AsyncGenerator<OutputEvent> {
    let offset = opts.offset ?? 0;
    const res = await this.transport.send({
      method: 'GET',
      path: this.route('output'),
      query: { offset, follow: opts.follow === false ? 'false' : undefined },
      headers: { Accept: 'text/event-stream' },
      signal: opts.signal,
    });
    const requestId = res.headers['x-request-id'] as string | undefined;
    let ended = false;
    try {
      for await (const ev of sseEvents(res)) {
        if (ev.event === 'output') {
          const data = Buffer.from(ev.data, 'base64');
          const next = ev.id !== undefined && /^\d+$/.test(ev.id) ? Number(ev.id) : offset + data.length;
          const start = next - data.length;
          offset = next;
          yield { type: 'output', data, offset: start, nextOffset: next };
        } else if (ev.event === 'exit') {
          const d = JSON.parse(ev.data) as { exitCode: number | null; signal: number | null; timedOut?: boolean };
          ended = true;
          yield { type: 'exit', exitCode: d.exitCode ?? null, signal: d.signal ?? null, timedOut: d.timedOut === true };
          return;
        } else if (ev.event === 'running') {
          const d = JSON.parse(ev.data) as { outputBytes: number };
          ended = true;
          yield { type: 'running', outputBytes: d.outputBytes };
          return;
        } else if (ev.event === 'error') {
          const d = JSON.parse(ev.data) as { code?: string; message?: string };
          throw errorFromStream(d.code ?? 'internal', d.message ?? 'the output stream failed', requestId);
        }
      }
      if (!ended) throw new ProtocolError(`the output stream of ${this.id} ended before the exit (reattach from offset ${offset})`, { requestId });
    } finally {
      res.destroy();
    }
  }

  /**
   * The output from `offset` (default 0) collected: by default what is
   * there now (`follow: false`), with `follow: true` until the exit.
   */
  async output(opts: AttachOptions = {}): Promise<OutputResult> {
    const chunks: Buffer[] = [];
    const result: OutputResult = { data: Buffer.alloc(0), nextOffset: opts.offset ?? 0, running: true, exitCode: null, signal: null, timedOut: false };
    for await (const ev of this.attach({ ...opts, follow: opts.follow ?? false })) {
      if (ev.type === 'output') {
        chunks.push(ev.data);
        result.nextOffset = ev.nextOffset;
      } else if (ev.type === 'exit') {
        Object.assign(result, { running: false, exitCode: ev.exitCode, signal: ev.signal, timedOut: ev.timedOut });
      } else {
        result.nextOffset = Math.max(result.nextOffset, ev.outputBytes);
      }
    }
    result.data = Buffer.concat(chunks);
    return result;
  }

  /** Waits for the exit (following the output from its current end). */
  async wait(opts: { signal?: AbortSignal } = {}): Promise<{ exitCode: number | null; signal: number | null; timedOut: boolean }> {
    const st = await this.status(opts);
    if (!st.running) return { exitCode: st.exitCode, signal: st.signal, timedOut: st.timedOut };
    for await (const ev of this.attach({ offset: st.outputBytes ?? 0, signal: opts.signal })) {
      if (ev.type === 'exit') return { exitCode: ev.exitCode, signal: ev.signal, timedOut: ev.timedOut };
    }
    const again = await this.status(opts);
    return { exitCode: again.exitCode, signal: again.signal, timedOut: again.timedOut };
  }

  /**
   * Writes to the stdin of a process started with `stdinOpen`, all of it:
   * what the pipe cannot take now is sent again after a short wait. With
   * `eof` the stdin is closed once all went. Returns the bytes written and
   * whether the stdin is still open (false: the process closed it, and the
   * rest went nowhere).
   */
  async writeStdin(data: string | Uint8Array, opts: { eof?: boolean; signal?: AbortSignal } = {}): Promise<{ written: number; open: boolean }> {
    let rest = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    let written = 0;
    let wait = 5;
    for (;;) {
      const piece = rest.subarray(0, STDIN_PIECE);
      const last = piece.length === rest.length;
      const r = await this.transport.json<{ written: number; open: boolean }>({
        method: 'POST',
        path: this.route('stdin'),
        json: { data: piece.length ? piece.toString('base64') : undefined, eof: last && opts.eof ? true : undefined },
        signal: opts.signal,
      });
      written += r.written;
      rest = rest.subarray(r.written);
      if (!r.open || (rest.length === 0 && (last || piece.length === 0))) return { written, open: r.open };
      if (r.written < piece.length) {
        await sleep(wait, opts.signal);
        wait = Math.min(wait * 2, 200);
      } else {
        wait = 5;
      }
    }
  }

  /** Closes the process's stdin. */
  async closeStdin(opts: { signal?: AbortSignal } = {}): Promise<{ written: number; open: boolean }> {
    return this.writeStdin(Buffer.alloc(0), { eof: true, signal: opts.signal });
  }

  /** Sends a signal (a name such as `TERM`/`SIGKILL`, or a number) to its process group; false if it had exited. */
  async signal(sig: string | number = 'TERM', opts: { signal?: AbortSignal } = {}): Promise<boolean> {
    const r = await this.transport.json<{ delivered: boolean }>({
      method: 'POST', path: this.route('signal'), json: { signal: sig }, signal: opts.signal,
    });
    return r.delivered;
  }

  /** Alias of `signal('KILL')`. */
  kill(): Promise<boolean> {
    return this.signal('KILL');
  }
}

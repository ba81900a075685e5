// One sandbox: exec (collected or streamed), detached processes, files,
// lifecycle (stop, resume, fork, snapshot, delete), hosted ports, the
// desktop, and `await using` / `Sandbox.with` that delete it afterwards.
import { randomUUID } from 'node:crypto';
import type { Transport } from './http.js';
import { lines, pathOf, readAll } from './http.js';
import { NotFoundError, ProtocolError, errorFromStream } from './errors.js';
import { Desktop } from './desktop.js';
import { Files } from './files.js';
import { Process, processInfo } from './process.js';
import { Sandboxer } from './client.js';
import type {
  Command, CreateOptions, CreateResult, Egress, ExecEvent, ExecOptions, ExecResult, HistoryEntry, HostedPort,
  ProcessInfo, SandboxInfo, SandboxState, SizeName, SnapshotInfo, StartOptions,
} from './types.js';

/** Options of `Sandbox.create` / `Sandbox.with`: the create body, and the client to use (default one from the environment). */
export interface SandboxCreateOptions extends CreateOptions {
  client?: Sandboxer;
}

function execBody(cmd: Command, opts: ExecOptions & StartOptions, extra: Record<string, unknown> = {}) {
  if (typeof cmd !== 'string' && (!Array.isArray(cmd) || cmd.length === 0)) {
    throw new TypeError('exec: the command is a non-empty string (run by /bin/sh -c) or a non-empty argv array');
  }
  const stdin = opts.stdin === undefined ? undefined
    : Buffer.from(typeof opts.stdin === 'string' ? Buffer.from(opts.stdin, 'utf8') : opts.stdin).toString('base64');
  return {
    ...(typeof cmd === 'string' ? { shell: cmd } : { command: [...cmd] }),
    env: opts.env,
    cwd: opts.cwd,
    user: opts.user === undefined ? undefined : String(opts.user),
    timeoutMs: opts.timeoutMs,
    stdin,
    ...extra,
  };
}

export class Sandbox {
  /** The sandbox's id (`sbx_…`). */
  readonly id: string;
  /** The guest's files. */
  readonly files: Files;
  /** The guest's graphical desktop and its computer-use actions. */
  readonly desktop: Desktop;
  /** The description from the last request that returned it (`refresh()` renews it). */
  info: SandboxInfo | undefined;
  /** The create's or fork's extra answer (`replayed`, `warnings`, …), for a sandbox made here. */
  createResult: CreateResult | undefined;

  constructor(readonly client: Sandboxer, idOrInfo: string | SandboxInfo) {
    this.id = typeof idOrInfo === 'string' ? idOrInfo : idOrInfo.id;
    this.info = typeof idOrInfo === 'string' ? undefined : idOrInfo;
    this.files = new Files(this.transport, this.id);
    this.desktop = new Desktop(this.transport, this.id);
  }

  private get transport(): Transport {
    return this.client.transport;
  }

  private route(...rest: string[]): string {
    return pathOf('v1', 'sandboxes', this.id, ...rest);
  }

  /** Creates a sandbox (see `Sandboxer.create`). */
  static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
    const { client, ...body } = opts;
    const c = client ?? new Sandboxer();
    return c.create(body);
  }

  /** Creates a sandbox, runs `fn` with it, and deletes it afterwards, whatever `fn` did. */
  static async with<T>(opts: SandboxCreateOptions, fn: (sandbox: Sandbox) => Promise<T> | T): Promise<T> {
    const sandbox = await Sandbox.create(opts);
    try {
      return await fn(sandbox);
    } finally {
      await sandbox.dispose();
    }
  }

  /** The last known state (`refresh()` renews it). */
  get state(): SandboxState | undefined {
    return this.info?.state;
  }

  get labels(): Record<string, string> {
    return this.info?.labels ?? {};
  }

  /** Fetches the sandbox's description anew. */
  async refresh(opts: { signal?: AbortSignal } = {}): Promise<SandboxInfo> {
    const r = await this.transport.json<{ sandbox: SandboxInfo }>({ method: 'GET', path: this.route(), signal: opts.signal });
    this.info = r.sandbox;
    return r.sandbox;
  }

  // ---- exec ----

  /**
   * Runs a command to its end: a string runs under `/bin/sh -c`, an array
   * is the argv. Resolves with its exit and its whole output (a timeout is
   * `timedOut` with `signal` 9, not an error).
   */
  async exec(cmd: Command, opts: ExecOptions = {}): Promise<ExecResult> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const result: ExecResult = { exitCode: null, signal: null, timedOut: false, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), pid: null };
    for await (const ev of this.execStream(cmd, opts)) {
      if (ev.type === 'stdout') out.push(ev.data);
      else if (ev.type === 'stderr') err.push(ev.data);
      else if (ev.type === 'start') result.pid = ev.pid;
      else Object.assign(result, { exitCode: ev.exitCode, signal: ev.signal, timedOut: ev.timedOut });
    }
    result.stdout = Buffer.concat(out);
    result.stderr = Buffer.concat(err);
    return result;
  }

  /**
   * Runs a command and yields its events as they come: `start`, `stdout`
   * and `stderr` chunks (Buffers), then `exit`. Leaving the loop early
   * closes the connection, which kills the command's process group.
   */
  async *execStream(cmd: Command, opts: ExecOptions = {}): AsyncGenerator<ExecEvent> {
    const body = execBody(cmd, opts);
    const res = await this.transport.send({ method: 'POST', path: this.route('exec'), json: body, signal: opts.signal });
    const requestId = res.headers['x-request-id'] as string | undefined;
    let exited = false;
    try {
      for await (const line of lines(res)) {
        if (line.trim() === '') continue;
        let ev: Record<string, unknown>;
        try {
          ev = JSON.parse(line) as Record<string, unknown>;
        } catch (e) {
          throw new ProtocolError(`exec: a line that is not JSON: ${line.slice(0, 200)}`, { requestId, cause: e });
        }
        switch (ev.type) {
          case 'start':
            yield { type: 'start', pid: typeof ev.pid === 'number' ? ev.pid : null };
            break;
          case 'stdout':
          case 'stderr':
            yield { type: ev.type, data: Buffer.from(String(ev.data ?? ''), 'base64') };
            break;
          case 'exit':
            exited = true;
            yield {
              type: 'exit',
              exitCode: typeof ev.exitCode === 'number' ? ev.exitCode : null,
              signal: typeof ev.signal === 'number' ? ev.signal : null,
              timedOut: ev.timedOut === true,
            };
            return;
          case 'error':
            throw errorFromStream(String(ev.code ?? 'internal'), String(ev.message ?? 'exec failed'), requestId);
          default:
            break; // a line type this SDK does not know yet
        }
      }
      if (!exited) throw new ProtocolError('exec: the stream ended without the exit', { requestId });
    } finally {
      res.destroy();
    }
  }

  /** Starts a detached process: it runs on without a connection, its output kept (the last 16 MiB). */
  async start(cmd: Command, opts: StartOptions = {}): Promise<Process> {
    const body = execBody(cmd, opts, { detach: true, stdinOpen: opts.stdinOpen || undefined });
    const r = await this.transport.json<{ process: { id: string; pid: number | null } }>({
      method: 'POST', path: this.route('exec'), json: body, signal: opts.signal,
    });
    return new Process(this.transport, this.id, r.process.id, r.process.pid ?? null);
  }

  /** A handle on a detached process by its id. */
  process(id: string): Process {
    return new Process(this.transport, this.id, id);
  }

  /** The detached processes. */
  async processes(): Promise<ProcessInfo[]> {
    const r = await this.transport.json<{ processes: ProcessInfo[] }>({ method: 'GET', path: this.route('processes') });
    return r.processes.map((p) => processInfo(p as never));
  }

  /** Every exec, oldest first. */
  async history(): Promise<HistoryEntry[]> {
    return (await this.transport.json<{ history: HistoryEntry[] }>({ method: 'GET', path: this.route('history') })).history;
  }

  /** The guest's serial console: from `offset`, or the last `tail` bytes. */
  async logs(opts: { offset?: number; tail?: number } = {}): Promise<{ data: Buffer; offset: number; size: number }> {
    const res = await this.transport.send({ method: 'GET', path: this.route('logs'), query: { offset: opts.offset, tail: opts.tail } });
    const data = await readAll(res);
    return { data, offset: Number(res.headers['sandbox-log-offset'] ?? 0), size: Number(res.headers['sandbox-log-size'] ?? data.length) };
  }

  // ---- lifecycle ----

  /** Stops it: with its memory (the default; processes survive a resume) or disk-only. */
  async stop(opts: { memory?: boolean; signal?: AbortSignal } = {}): Promise<SandboxInfo> {
    const r = await this.transport.json<{ sandbox: SandboxInfo }>({
      method: 'POST', path: this.route('stop'), json: { memory: opts.memory }, signal: opts.signal,
    });
    this.info = r.sandbox;
    return r.sandbox;
  }

  /** Resumes a stopped, paused or crashed sandbox (a new `size` means a cold boot). */
  async resume(opts: { size?: SizeName; signal?: AbortSignal } = {}): Promise<SandboxInfo & { memoryRestored?: boolean; resumeReason?: string }> {
    const r = await this.transport.json<{ sandbox: SandboxInfo; memoryRestored?: boolean; resumeReason?: string }>({
      method: 'POST', path: this.route('resume'), json: { size: opts.size }, signal: opts.signal,
    });
    this.info = r.sandbox;
    return { ...r.sandbox, memoryRestored: r.memoryRestored, resumeReason: r.resumeReason };
  }

  /**
   * Forks it into `count` children (default 1), with its memory (default;
   * it must be running) or disk-only. Sent with an Idempotency-Key (a
   * random one unless given), so a retried fork makes its children once.
   */
  async fork(opts: { count?: number; memory?: boolean; idempotencyKey?: string; signal?: AbortSignal } = {}): Promise<Sandbox[]> {
    const r = await this.transport.json<{ sandboxes: SandboxInfo[]; replayed: boolean }>({
      method: 'POST',
      path: this.route('fork'),
      json: { count: opts.count, memory: opts.memory },
      idempotencyKey: opts.idempotencyKey ?? randomUUID(),
      signal: opts.signal,
    });
    return r.sandboxes.map((s) => {
      const child = new Sandbox(this.client, s);
      child.createResult = { replayed: r.replayed, warnings: [] };
      return child;
    });
  }

  /** Saves it as a named snapshot (to create from with `from: name`). */
  async snapshot(name: string, opts: { signal?: AbortSignal } = {}): Promise<SnapshotInfo> {
    const r = await this.transport.json<{ snapshot: SnapshotInfo }>({
      method: 'POST', path: this.route('snapshot'), json: { name }, signal: opts.signal,
    });
    return r.snapshot;
  }

  /** Deletes it (its VMM, disk and folder). */
  async delete(opts: { signal?: AbortSignal } = {}): Promise<void> {
    await this.transport.json({ method: 'DELETE', path: this.route(), signal: opts.signal });
    if (this.info) this.info = { ...this.info, state: 'deleting' };
  }

  /** Deletes it unless it is gone already (what `await using` and `Sandbox.with` call). */
  async dispose(): Promise<void> {
    try {
      await this.delete();
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }

  /** A new auto-stop `ttl` seconds from now; `null` turns it off; no argument: its own length again. */
  async setTtl(ttl?: number | null): Promise<SandboxInfo> {
    const json = ttl === null ? { noAutoStop: true } : { ttl };
    const r = await this.transport.json<{ sandbox: SandboxInfo }>({ method: 'POST', path: this.route('ttl'), json, idempotent: true });
    this.info = r.sandbox;
    return r.sandbox;
  }

  /** The idle pause after `minutes` without activity; 0 turns it off. */
  async setIdle(minutes: number): Promise<SandboxInfo> {
    const r = await this.transport.json<{ sandbox: SandboxInfo }>({
      method: 'POST', path: this.route('idle'), json: { idleMinutes: minutes }, idempotent: true,
    });
    this.info = r.sandbox;
    return r.sandbox;
  }

  /** The egress policy: `internet`, `deny-all`, or a list of IPv4 networks (allow-list). */
  async setEgress(egress: Egress | string[]): Promise<SandboxInfo> {
    const json = Array.isArray(egress) ? { egress: 'allow-list', egressAllow: egress } : { egress };
    const r = await this.transport.json<{ sandbox: SandboxInfo }>({ method: 'POST', path: this.route('egress'), json, idempotent: true });
    this.info = r.sandbox;
    return r.sandbox;
  }

  // ---- hosted ports ----

  /**
   * Serves the guest's `port` over HTTPS through sbxd's proxy and returns
   * its URL: the plain URL for a public port, the one with `?_token=` for a
   * private one (the default). `hostedPort` gives the whole record.
   */
  async hostPort(port: number, opts: { public?: boolean; localhost?: boolean } = {}): Promise<string> {
    const h = await this.hostedPort(port, opts);
    const url = opts.public ? h.url : h.tokenUrl ?? h.url;
    if (!url) throw new ProtocolError(`port ${port} is hosted but sbxd gave no URL (does it serve hosted ports?)`);
    return url;
  }

  /** Hosts a port and returns its record (`url`, and `token`/`tokenUrl` for a private port). */
  async hostedPort(port: number, opts: { public?: boolean; localhost?: boolean } = {}): Promise<HostedPort> {
    const r = await this.transport.json<{ hostedPort: HostedPort }>({
      method: 'POST', path: this.route('ports'), json: { port, public: opts.public ?? false, localhost: opts.localhost }, idempotent: true,
    });
    return r.hostedPort;
  }

  /** Its hosted ports. */
  async hostedPorts(): Promise<HostedPort[]> {
    return (await this.transport.json<{ hostedPorts: HostedPort[] }>({ method: 'GET', path: this.route('ports') })).hostedPorts;
  }

  /** Stops serving a hosted port; its URL answers 404 from then on. */
  async unhost(port: number): Promise<void> {
    await this.transport.json({ method: 'DELETE', path: this.route('ports', String(port)) });
  }

  toJSON(): SandboxInfo | { id: string } {
    return this.info ?? { id: this.id };
  }
}

// `await using sandbox = await Sandbox.create(…)` deletes it at the end of
// the scope (TypeScript 5.2+, or Node with explicit resource management).
export interface Sandbox {
  [Symbol.asyncDispose](): Promise<void>;
}
if (typeof Symbol.asyncDispose === 'symbol') {
  Object.defineProperty(Sandbox.prototype, Symbol.asyncDispose, {
    value: function (this: Sandbox) {
      return this.dispose();
    },
    writable: true,
    configurable: true,
  });
}

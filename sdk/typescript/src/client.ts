// The client: where sbxd is (SBX_HOST, SBX_API_KEY), and the host-wide
// routes: create, list, find, get, bulk delete, snapshots, API keys, events,
// limits.
import { randomUUID } from 'node:crypto';
import { Transport, pathOf, type ClientOptions } from './http.js';
import { Sandbox } from './sandbox.js';
import type {
  ApiKeyInfo, CreateOptions, HostedPort, KeyCreateOptions, ListOptions, NewKey, SandboxEvent, SandboxInfo, SnapshotInfo,
} from './types.js';

function labelSelector(labels: Record<string, string> | undefined): string | undefined {
  if (!labels) return undefined;
  const parts = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
  return parts.length ? parts.join(',') : undefined;
}

function stateSelector(state: ListOptions['state']): string | undefined {
  if (state === undefined) return undefined;
  const all = Array.isArray(state) ? state : [state];
  return all.length ? all.join(',') : undefined;
}

/** Named snapshots (`client.snapshots`). */
export class Snapshots {
  constructor(private readonly transport: Transport) {}

  /** Every snapshot, oldest first. */
  async list(): Promise<SnapshotInfo[]> {
    return (await this.transport.json<{ snapshots: SnapshotInfo[] }>({ method: 'GET', path: '/v1/snapshots' })).snapshots;
  }

  async get(name: string): Promise<SnapshotInfo> {
    return (await this.transport.json<{ snapshot: SnapshotInfo }>({ method: 'GET', path: pathOf('v1', 'snapshots', name) })).snapshot;
  }

  /** Deletes a snapshot (sandboxes made from it keep their disks). */
  async delete(name: string): Promise<void> {
    await this.transport.json({ method: 'DELETE', path: pathOf('v1', 'snapshots', name) });
  }
}

/**
 * API keys (`client.keys`), for host-wide callers only: a sandbox's key
 * manages none, and a read-only key may only list.
 */
export class Keys {
  constructor(private readonly transport: Transport) {}

  /**
   * Makes a key: host-wide, or scoped to `sandboxId`. Its `secret` is in
   * this answer only. Sent once, never retried (a retry could make two keys).
   */
  async create(opts: KeyCreateOptions = {}): Promise<NewKey> {
    const body: Record<string, unknown> = { ...opts };
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const r = await this.transport.json<{ key: ApiKeyInfo; secret: string }>({ method: 'POST', path: '/v1/keys', json: body });
    return { ...r.key, secret: r.secret };
  }

  /** Every key, oldest first (sandboxes' own keys too), without secrets. */
  async list(): Promise<ApiKeyInfo[]> {
    return (await this.transport.json<{ keys: ApiKeyInfo[] }>({ method: 'GET', path: '/v1/keys' })).keys;
  }

  /** Revokes a key by id (`key_…`): the next request with it is 401. */
  async delete(id: string): Promise<void> {
    await this.transport.json({ method: 'DELETE', path: pathOf('v1', 'keys', id) });
  }
}

/**
 * A client of one sbxd. `host` is `unix:PATH` or `http://HOST:PORT`
 * (default `$SBX_HOST`, else `unix:/run/sandboxer/sbxd.sock`); `apiKey`
 * (default `$SBX_API_KEY`) is sent as `Authorization: Bearer` on TCP only.
 */
export class Sandboxer {
  readonly transport: Transport;
  readonly snapshots: Snapshots;
  readonly keys: Keys;

  constructor(opts: ClientOptions = {}) {
    this.transport = new Transport(opts);
    this.snapshots = new Snapshots(this.transport);
    this.keys = new Keys(this.transport);
  }

  /** The host as used (`unix:/…` or `http://…`). */
  get host(): string {
    return this.transport.endpoint.display;
  }

  /** `GET /v1/health`: `{host, version, uptimeSeconds, schemaVersion}`. */
  async health(): Promise<Record<string, unknown>> {
    return this.transport.json({ method: 'GET', path: '/v1/health' });
  }

  /** `GET /v1/limits`: the admission limits and the current counts. */
  async limits(): Promise<Record<string, unknown>> {
    return (await this.transport.json<{ limits: Record<string, unknown> }>({ method: 'GET', path: '/v1/limits' })).limits;
  }

  /**
   * Creates a sandbox and resolves once its agent answers. Always sent with
   * an `Idempotency-Key` (a random one unless `idempotencyKey` is given), so
   * the retries after a 429, a 5xx or a broken connection make one sandbox.
   * A number `ttl` is seconds.
   */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const { idempotencyKey, signal, ttl, ...rest } = opts;
    const body: Record<string, unknown> = { ...rest };
    if (ttl !== undefined) body.ttl = typeof ttl === 'number' ? `${Math.round(ttl)}s` : ttl;
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const r = await this.transport.json<{ sandbox: SandboxInfo; replayed: boolean; warnings: string[]; memoryRestored?: boolean; startReason?: string }>({
      method: 'POST', path: '/v1/sandboxes', json: body, idempotencyKey: idempotencyKey ?? randomUUID(), signal,
    });
    const sandbox = new Sandbox(this, r.sandbox);
    sandbox.createResult = { replayed: r.replayed, warnings: r.warnings ?? [], memoryRestored: r.memoryRestored, startReason: r.startReason };
    return sandbox;
  }

  /** Creates a sandbox, runs `fn` with it, and deletes it afterwards. */
  async with<T>(opts: CreateOptions, fn: (sandbox: Sandbox) => Promise<T> | T): Promise<T> {
    return Sandbox.with({ ...opts, client: this }, fn);
  }

  /** A sandbox by id, fetched (404 NotFoundError if none). */
  async get(id: string): Promise<Sandbox> {
    const r = await this.transport.json<{ sandbox: SandboxInfo }>({ method: 'GET', path: pathOf('v1', 'sandboxes', id) });
    return new Sandbox(this, r.sandbox);
  }

  /** A handle on a sandbox by id, without a request. */
  sandbox(id: string): Sandbox {
    return new Sandbox(this, id);
  }

  /** The sandboxes with every label given, in any of the states given (all without either). */
  async list(opts: ListOptions = {}): Promise<Sandbox[]> {
    const r = await this.transport.json<{ sandboxes: SandboxInfo[] }>({
      method: 'GET', path: '/v1/sandboxes', query: { labels: labelSelector(opts.labels), state: stateSelector(opts.state) },
    });
    return r.sandboxes.map((s) => new Sandbox(this, s));
  }

  /** The sandboxes with all of `labels` (required: a find never means "every sandbox"). */
  async find(opts: ListOptions & { labels: Record<string, string> }): Promise<Sandbox[]> {
    if (!labelSelector(opts.labels)) throw new TypeError('find: give at least one label (list() lists every sandbox)');
    return this.list(opts);
  }

  /** Deletes every sandbox with all of `labels` (and in one of `state`); `dryRun` only lists them. */
  async deleteWhere(opts: ListOptions & { labels: Record<string, string>; dryRun?: boolean }): Promise<{
    deleted: string[]; dryRun: boolean; failed: Array<{ id: string; code: string; message: string }>;
  }> {
    const labels = labelSelector(opts.labels);
    if (!labels) throw new TypeError('deleteWhere: give at least one label');
    const r = await this.transport.json<{ deleted: string[]; dryRun: boolean; failed?: Array<{ id: string; code: string; message: string }> }>({
      method: 'DELETE', path: '/v1/sandboxes', query: { labels, state: stateSelector(opts.state), dryRun: opts.dryRun ? 'true' : undefined },
    });
    return { deleted: r.deleted, dryRun: r.dryRun, failed: r.failed ?? [] };
  }

  /** Up to 1000 events after `after` (an event id), oldest first. */
  async events(opts: { after?: number } = {}): Promise<SandboxEvent[]> {
    return (await this.transport.json<{ events: SandboxEvent[] }>({ method: 'GET', path: '/v1/events', query: { after: opts.after } })).events;
  }

  /** Every sandbox's hosted ports. */
  async hostedPorts(): Promise<HostedPort[]> {
    return (await this.transport.json<{ hostedPorts: HostedPort[] }>({ method: 'GET', path: '/v1/ports' })).hostedPorts;
  }

  /** sbxd's own CA certificate (PEM), which signs the hosted ports' certificate. */
  async ca(): Promise<string> {
    return (await this.transport.json<{ certificate: string }>({ method: 'GET', path: '/v1/ca' })).certificate;
  }
}

// The API's shapes (docs/api.md, docs/openapi.yaml) as TypeScript types.

export type SandboxState = 'creating' | 'running' | 'stopping' | 'stopped' | 'paused' | 'crashed' | 'deleting';
export type SizeName = 'small' | 'default' | 'large' | 'xlarge';
export type Egress = 'internet' | 'deny-all' | 'allow-list';

export interface SandboxNetwork {
  interface: string;
  mac: string;
  egress: Egress;
  address?: string;
  gateway?: string;
}

/** A sandbox as sbxd describes it (`GET /v1/sandboxes/{id}`). */
export interface SandboxInfo {
  id: string;
  name: string;
  state: SandboxState;
  host: string;
  from: string;
  size: SizeName | 'custom';
  cpus: number;
  memoryMib: number;
  diskGib: number;
  labels: Record<string, string>;
  envNames: string[];
  noEnv: boolean;
  createdAt: string;
  startedAt: string | null;
  lastActivityAt: string;
  autoStopAt: string | null;
  ttlSeconds: number | null;
  idleMinutes: number | null;
  egress: Egress;
  egressAllow: string[];
  network: SandboxNetwork | null;
  [key: string]: unknown;
}

/** The body of `POST /v1/sandboxes`; every field optional. */
export interface CreateOptions {
  size?: SizeName;
  cpus?: number;
  memoryMib?: number;
  diskGib?: number;
  /** An image (`default`) or a named snapshot. */
  from?: string;
  labels?: Record<string, string>;
  env?: Record<string, string>;
  noEnv?: boolean;
  idleMinutes?: number;
  /** `90s`, `30m`, `2h30m`, `7d`, or a number of seconds. */
  ttl?: string | number;
  noAutoStop?: boolean;
  cold?: boolean;
  egress?: Egress;
  egressAllow?: string[];
  /** Sent as `Idempotency-Key`; a random one (crypto.randomUUID) when not given. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface CreateResult {
  replayed: boolean;
  warnings: string[];
  memoryRestored?: boolean;
  startReason?: string;
}

export interface ListOptions {
  /** Every label given must match. */
  labels?: Record<string, string>;
  /** Any of the states given. */
  state?: SandboxState | SandboxState[];
}

export interface SnapshotInfo {
  name: string;
  from: string;
  image: string;
  createdAt: string;
  memory: boolean;
  cpus: number;
  memoryMib: number;
  diskGib: number;
  sizeBytes: number;
  cpuSignature: string | null;
  [key: string]: unknown;
}

/** An API key as sbxd lists it (`client.keys.list()`): never its secret. */
export interface ApiKeyInfo {
  /** `key_…` */
  id: string;
  name: string;
  createdAt: string;
  /** The sandbox it is scoped to; null for a host-wide key. */
  sandboxId: string | null;
  /** GET and HEAD only. */
  readOnly: boolean;
  /** null: it never expires. */
  expiresAt: string | null;
}

/** `client.keys.create()`: the key and its secret, which sbxd shows this once (it keeps its SHA-256). */
export interface NewKey extends ApiKeyInfo {
  /** `sbxk_` and 64 hex digits: the Bearer token. */
  secret: string;
}

/** The body of `POST /v1/keys`; every field optional. */
export interface KeyCreateOptions {
  /** At most 128 bytes, no control characters. */
  name?: string;
  /** Scope it to this sandbox (404 NotFoundError if there is none); host-wide without. */
  sandboxId?: string;
  readOnly?: boolean;
  /** 1 s to 10 years; never expires without. */
  expiresInSeconds?: number;
}

export interface HostedPort {
  sandboxId: string;
  port: number;
  public: boolean;
  localhost: boolean;
  createdAt: string;
  url?: string;
  token?: string;
  tokenUrl?: string;
}

/** A command: a string runs under `/bin/sh -c`, an array is the argv. */
export type Command = string | readonly string[];

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** A user name or uid (default: the image's, `user` in the default image, root in `slim`). */
  user?: string | number;
  /** Kill the process group after this many ms (0: never). */
  timeoutMs?: number;
  /** Bytes for stdin (sent whole, then EOF); a string is UTF-8. */
  stdin?: string | Uint8Array;
  signal?: AbortSignal;
}

export interface StartOptions extends Omit<ExecOptions, 'stdin'> {
  /** The process's stdin is a pipe written with `process.writeStdin` (else /dev/null). */
  stdinOpen?: boolean;
}

export interface ExecResult {
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  stdout: Buffer;
  stderr: Buffer;
  pid: number | null;
}

export type ExecEvent =
  | { type: 'start'; pid: number | null }
  | { type: 'stdout'; data: Buffer }
  | { type: 'stderr'; data: Buffer }
  | { type: 'exit'; exitCode: number | null; signal: number | null; timedOut: boolean };

export interface ProcessInfo {
  id: string | null;
  pid: number | null;
  command: string[] | null;
  running: boolean;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  startedAtMs: number | null;
  outputBytes: number | null;
  /** The last ≤ 4 KiB of output (from `status()` only). */
  tail?: Buffer;
}

/** One event of a detached process's output stream. */
export type OutputEvent =
  /** `data` covers bytes [offset, nextOffset) of the output; reattach from `nextOffset`. */
  | { type: 'output'; data: Buffer; offset: number; nextOffset: number }
  | { type: 'exit'; exitCode: number | null; signal: number | null; timedOut: boolean }
  /** With `follow: false`: the process runs on; its output so far ends at `outputBytes`. */
  | { type: 'running'; outputBytes: number };

export interface OutputResult {
  data: Buffer;
  /** Where the bytes returned end: the offset to read on from. */
  nextOffset: number;
  running: boolean;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
}

export interface FileStat {
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  mtime: number;
  uid: number;
  gid: number;
  target?: string;
}

export interface FileEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  mtime: number;
}

export interface TarUploadResult {
  bytes: number;
  entries: number;
  skipped: number;
}

export interface TarDownloadResult {
  bytes: number;
  entries: number;
  skipped: number;
}

export interface HistoryEntry {
  id: number;
  command: string[];
  startedAt: string;
  exitCode: number | null;
  keyId: string | null;
}

export interface SandboxEvent {
  id: number;
  sandboxId: string | null;
  type: string;
  data: unknown;
  at: string;
}

/** A sandbox's desktop (`POST`/`GET /v1/sandboxes/{id}/desktop`): the four numbers are null while no X server runs. */
export interface DesktopInfo {
  running: boolean;
  sessionRunning: boolean;
  display: number | null;
  width: number | null;
  height: number | null;
  vncPort: number | null;
  /** Opens it in a browser with mouse and keyboard; null when sbxd serves no links (and for a read-only key). */
  url: string | null;
  /** Opens it in a browser to watch only. */
  viewOnlyUrl: string | null;
  /** From `start()`: whether this call started it (false: one ran already). */
  started?: boolean;
  /** From `start()`, e.g. that sbxd serves no links. */
  warnings?: string[];
  [key: string]: unknown;
}

/** The actions of Anthropic's computer-use tool (computer_20250124, and zoom of computer_20251124). */
export type DesktopActionName =
  | 'screenshot' | 'zoom' | 'mouse_move' | 'left_click' | 'right_click' | 'middle_click' | 'double_click'
  | 'triple_click' | 'left_click_drag' | 'left_mouse_down' | 'left_mouse_up' | 'scroll' | 'type' | 'key'
  | 'hold_key' | 'cursor_position' | 'wait';

/** One action as the tool's call gives it (`POST …/desktop/actions`); coordinates are the screen's pixels. */
export interface DesktopAction {
  action: DesktopActionName;
  coordinate?: [number, number];
  start_coordinate?: [number, number];
  region?: [number, number, number, number];
  text?: string;
  scroll_direction?: 'up' | 'down' | 'left' | 'right';
  scroll_amount?: number;
  duration?: number;
  max_width?: number;
  max_height?: number;
}

/** An action's result: `{}`, `{x, y}` (cursor_position), `{png, width, height}` (screenshot, zoom; png base64). */
export interface DesktopActionResult {
  png?: string;
  width?: number;
  height?: number;
  x?: number;
  y?: number;
  stderr?: string;
  [key: string]: unknown;
}

/** Mouse buttons of `Desktop.click`. */
export type MouseButton = 'left' | 'right' | 'middle';

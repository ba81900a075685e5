// A sandbox's files (docs/api.md, "Files"): single files streamed both
// ways, stat, list, mkdir, remove, and whole trees over the tar routes.
import { createReadStream, createWriteStream, promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomBytes } from 'node:crypto';
import type { Transport } from './http.js';
import { pathOf, readAll, streamError } from './http.js';
import { extractTar, packDir, type PackStats } from './tar.js';
import type { FileEntry, FileStat, TarDownloadResult, TarUploadResult } from './types.js';

/** What `write` takes: bytes, text (UTF-8), or a stream of bytes. */
export type FileData = string | Uint8Array | Readable | AsyncIterable<Uint8Array>;

function modeString(mode: number | string | undefined): string | undefined {
  if (mode === undefined) return undefined;
  if (typeof mode === 'string') return mode;
  return mode.toString(8).padStart(4, '0');
}

export class Files {
  constructor(private readonly transport: Transport, readonly sandboxId: string) {}

  private route(...rest: string[]): string {
    return pathOf('v1', 'sandboxes', this.sandboxId, 'files', ...rest);
  }

  /** The file's bytes as a stream, as the guest sends them (any size). A body cut short errors the stream. */
  async readStream(remote: string, opts: { signal?: AbortSignal } = {}): Promise<Readable> {
    const res = await this.transport.send({ method: 'GET', path: this.route(), query: { path: remote }, signal: opts.signal });
    async function* chunks(): AsyncGenerator<Buffer> {
      try {
        for await (const c of res) yield c as Buffer;
      } catch (e) {
        throw streamError(e);
      } finally {
        res.destroy();
      }
    }
    return Readable.from(chunks(), { objectMode: false });
  }

  /** The whole file. */
  async readBytes(remote: string, opts: { signal?: AbortSignal } = {}): Promise<Buffer> {
    const res = await this.transport.send({ method: 'GET', path: this.route(), query: { path: remote }, signal: opts.signal });
    return readAll(res);
  }

  /** The whole file as text (default UTF-8). */
  async readText(remote: string, opts: { encoding?: BufferEncoding; signal?: AbortSignal } = {}): Promise<string> {
    return (await this.readBytes(remote, opts)).toString(opts.encoding ?? 'utf8');
  }

  /**
   * Writes (replaces atomically) a guest file; `mode` octal as a number
   * (0o644) or a string ("0644"). A stream is sent chunked, never held
   * whole. Returns the bytes written.
   */
  async write(remote: string, data: FileData, opts: { mode?: number | string; signal?: AbortSignal } = {}): Promise<number> {
    const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const r = await this.transport.json<{ bytes: number }>({
      method: 'PUT', path: this.route(), query: { path: remote, mode: modeString(opts.mode) }, body, signal: opts.signal,
    });
    return r.bytes;
  }

  /** Copies a guest file to a local one: written beside it and renamed over it once complete. */
  async download(remote: string, local: string, opts: { signal?: AbortSignal } = {}): Promise<number> {
    const tmp = `${local}.sbx-partial-${randomBytes(4).toString('hex')}`;
    let bytes = 0;
    try {
      const src = await this.readStream(remote, opts);
      src.on('data', (c: Buffer) => { bytes += c.length; });
      await pipeline(src, createWriteStream(tmp, { flags: 'wx' }));
      await fsp.rename(tmp, local);
    } catch (e) {
      await fsp.rm(tmp, { force: true });
      throw e;
    }
    return bytes;
  }

  /** Copies a local file into the guest, streamed; the mode is the local file's unless given. */
  async upload(local: string, remote: string, opts: { mode?: number | string; signal?: AbortSignal } = {}): Promise<number> {
    const st = await fsp.stat(local);
    return this.write(remote, createReadStream(local), { mode: opts.mode ?? (st.mode & 0o7777), signal: opts.signal });
  }

  /** Stat without following a final symlink. */
  async stat(remote: string, opts: { signal?: AbortSignal } = {}): Promise<FileStat> {
    const r = await this.transport.json<{ stat: FileStat }>({ method: 'GET', path: this.route('stat'), query: { path: remote }, signal: opts.signal });
    return r.stat;
  }

  /** Whether a path exists (a symlink counts, whatever it points at). */
  async exists(remote: string): Promise<boolean> {
    try {
      await this.stat(remote);
      return true;
    } catch (e) {
      if ((e as { code?: string }).code === 'not_found') return false;
      throw e;
    }
  }

  /** A directory's entries, sorted by name. */
  async list(remote: string, opts: { signal?: AbortSignal } = {}): Promise<FileEntry[]> {
    const r = await this.transport.json<{ entries: FileEntry[] }>({ method: 'GET', path: this.route('list'), query: { path: remote }, signal: opts.signal });
    return r.entries;
  }

  /** Makes a directory (by default with its parents; an existing one is then fine). */
  async mkdir(remote: string, opts: { parents?: boolean; mode?: number; signal?: AbortSignal } = {}): Promise<void> {
    const parents = opts.parents ?? true;
    await this.transport.json({
      method: 'POST', path: this.route('mkdir'), json: { path: remote, parents, mode: opts.mode }, idempotent: parents, signal: opts.signal,
    });
  }

  /** Removes a file, a symlink or a directory (a non-empty one needs `recursive`). */
  async remove(remote: string, opts: { recursive?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    await this.transport.json({
      method: 'DELETE', path: this.route(), query: { path: remote, recursive: opts.recursive ? 'true' : undefined }, signal: opts.signal,
    });
  }

  /**
   * Copies a local directory's contents into the guest directory `remote`
   * (made, with its parents, if missing) as one tar stream, packed as it
   * goes. Symlinks travel as links; devices, fifos and sockets are left out.
   */
  async uploadDir(local: string, remote: string, opts: { signal?: AbortSignal } = {}): Promise<TarUploadResult & { sent: PackStats }> {
    const sent: PackStats = { entries: 0, skipped: 0 };
    const r = await this.transport.json<TarUploadResult>({
      method: 'PUT', path: this.route('tar'), query: { path: remote }, body: packDir(local, sent),
      headers: { 'Content-Type': 'application/x-tar' }, signal: opts.signal,
    });
    return { bytes: r.bytes, entries: r.entries, skipped: r.skipped, sent };
  }

  /**
   * Copies the guest directory `remote`'s contents into the local
   * directory `local` (made if missing), unpacked as the tar stream comes.
   * A guest file as `remote` lands as `local/NAME`. Refuses what would
   * write outside `local` (ArchiveError).
   */
  async downloadDir(remote: string, local: string, opts: { signal?: AbortSignal } = {}): Promise<TarDownloadResult> {
    const res = await this.transport.send({ method: 'GET', path: this.route('tar'), query: { path: remote }, signal: opts.signal });
    async function* chunks(): AsyncGenerator<Uint8Array> {
      try {
        for await (const c of res) yield c as Buffer;
      } catch (e) {
        throw streamError(e);
      }
    }
    try {
      return await extractTar(chunks(), path.resolve(local));
    } finally {
      res.destroy();
    }
  }
}

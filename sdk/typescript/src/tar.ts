// A minimal POSIX tar (ustar, with PAX extended headers where a field does
// not fit) writer and reader, as Node has none: enough for sbxd's
// `…/files/tar` routes. Both stream: nothing is held whole in memory.
//
// The writer archives a local directory's contents (names relative to it,
// directories with a trailing `/`, each directory's entries sorted by name)
// with regular files, directories and symlinks; devices, fifos and
// sockets are left out; hard links come as separate copies.
//
// The reader extracts into a directory and refuses (ArchiveError) what
// could write outside it: an absolute name or one with a `..` component,
// an entry below a symlink (already there or from the archive), a symlink
// whose target may lead out (absolute, or climbing above the directory), a
// hard link to outside it. A file, symlink or link replaces a non-directory
// at its name, never writing through it. Modes come from the archive
// without set-id bits; owners are never set.
import { constants as fsc, promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { SandboxerError } from './errors.js';

/** An archive that is malformed, or that would write outside its directory. */
export class ArchiveError extends SandboxerError {
  constructor(message: string) {
    super(message, { code: 'archive_error' });
  }
}

const BLOCK = 512;
const MAX_OCTAL_SIZE = 0o77777777777; // 11 digits
const MAX_OCTAL_ID = 0o7777777; // 7 digits

function octal(buf: Buffer, off: number, len: number, value: number): void {
  const s = value.toString(8).padStart(len - 1, '0');
  buf.write(s + '\0', off, len, 'ascii');
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

/** Splits a name into ustar's prefix and name, or undefined when it does not fit. */
function splitName(name: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', name };
  for (let i = name.length - 1; i > 0; i--) {
    if (name[i] !== '/') continue;
    const prefix = name.slice(0, i);
    const rest = name.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(rest) <= 100 && rest.length > 0) return { prefix, name: rest };
  }
  return undefined;
}

interface HeaderFields {
  name: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  type: string;
  linkname?: string;
}

function ustarHeader(f: HeaderFields, fallbackName: string): Buffer {
  const h = Buffer.alloc(BLOCK);
  const split = splitName(f.name) ?? { prefix: '', name: fallbackName };
  h.write(split.name, 0, 100, 'utf8');
  octal(h, 100, 8, f.mode & 0o7777);
  octal(h, 108, 8, f.uid <= MAX_OCTAL_ID ? f.uid : 0);
  octal(h, 116, 8, f.gid <= MAX_OCTAL_ID ? f.gid : 0);
  octal(h, 124, 12, f.size <= MAX_OCTAL_SIZE ? f.size : 0);
  octal(h, 136, 12, f.mtime >= 0 && f.mtime <= MAX_OCTAL_SIZE ? f.mtime : 0);
  h.fill(0x20, 148, 156);
  h.write(f.type, 156, 1, 'ascii');
  if (f.linkname) h.write(f.linkname, 157, 100, 'utf8');
  h.write('ustar\0', 257, 6, 'ascii');
  h.write('00', 263, 2, 'ascii');
  h.write(split.prefix, 345, 155, 'utf8');
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += h[i]!;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
  return h;
}

/** The header blocks of one entry: a PAX extended header first when a field does not fit ustar. */
export function entryHeader(f: HeaderFields): Buffer {
  const records: string[] = [];
  if (!splitName(f.name)) records.push(paxRecord('path', f.name));
  if (f.linkname && Buffer.byteLength(f.linkname) > 100) records.push(paxRecord('linkpath', f.linkname));
  if (f.size > MAX_OCTAL_SIZE) records.push(paxRecord('size', String(f.size)));
  if (f.uid > MAX_OCTAL_ID) records.push(paxRecord('uid', String(f.uid)));
  if (f.gid > MAX_OCTAL_ID) records.push(paxRecord('gid', String(f.gid)));
  if (f.mtime < 0 || f.mtime > MAX_OCTAL_SIZE) records.push(paxRecord('mtime', String(f.mtime)));
  const main = ustarHeader(f, 'pax-entry');
  if (!records.length) return main;
  const data = Buffer.from(records.join(''), 'utf8');
  const pax = ustarHeader({ name: 'PaxHeaders/entry', mode: 0o644, uid: 0, gid: 0, size: data.length, mtime: 0, type: 'x' }, 'PaxHeaders');
  return Buffer.concat([pax, data, Buffer.alloc(padding(data.length)), main]);
}

function padding(n: number): number {
  return (BLOCK - (n % BLOCK)) % BLOCK;
}

/** What `packDir` counted, once the stream has ended. */
export interface PackStats {
  entries: number;
  skipped: number;
}

async function* packEntries(root: string, rel: string, stats: PackStats): AsyncGenerator<Buffer> {
  const dir = rel ? path.join(root, rel) : root;
  const names = (await fsp.readdir(dir)).sort((a, b) => (Buffer.compare(Buffer.from(a), Buffer.from(b))));
  for (const n of names) {
    const name = rel ? `${rel}/${n}` : n;
    const full = path.join(root, name);
    const st = await fsp.lstat(full);
    const base = { mode: st.mode, uid: st.uid, gid: st.gid, mtime: Math.floor(st.mtimeMs / 1000) };
    if (st.isDirectory()) {
      stats.entries++;
      yield entryHeader({ ...base, name: `${name}/`, size: 0, type: '5' });
      yield* packEntries(root, name, stats);
    } else if (st.isSymbolicLink()) {
      stats.entries++;
      yield entryHeader({ ...base, name, size: 0, type: '2', linkname: await fsp.readlink(full) });
    } else if (st.isFile()) {
      stats.entries++;
      yield entryHeader({ ...base, name, size: st.size, type: '0' });
      const fh = await fsp.open(full, fsc.O_RDONLY | fsc.O_NOFOLLOW);
      try {
        let left = st.size;
        while (left > 0) {
          const want = Math.min(left, 1 << 16);
          const buf = Buffer.alloc(want);
          const { bytesRead } = await fh.read(buf, 0, want, null);
          if (bytesRead === 0) throw new ArchiveError(`${full} shrank while it was archived`);
          left -= bytesRead;
          yield bytesRead === want ? buf : buf.subarray(0, bytesRead);
        }
      } finally {
        await fh.close();
      }
      const pad = padding(st.size);
      if (pad) yield Buffer.alloc(pad);
    } else {
      stats.skipped++;
    }
  }
}

/** A tar stream of `dir`'s contents (not `dir` itself); `stats` fills as it goes. */
export function packDir(dir: string, stats: PackStats = { entries: 0, skipped: 0 }): Readable {
  async function* all(): AsyncGenerator<Buffer> {
    const st = await fsp.stat(dir);
    if (!st.isDirectory()) throw new ArchiveError(`${dir} is not a directory`);
    yield* packEntries(dir, '', stats);
    yield Buffer.alloc(BLOCK * 2);
  }
  return Readable.from(all(), { objectMode: false });
}

// ---- reading ----

/** Reads exact byte counts from an async iterable of chunks. */
class ChunkReader {
  private chunks: Buffer[] = [];
  private have = 0;
  private done = false;
  bytes = 0;
  constructor(private readonly it: AsyncIterator<Uint8Array>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.have < n && !this.done) {
      const r = await this.it.next();
      if (r.done) {
        this.done = true;
        break;
      }
      const b = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value);
      this.bytes += b.length;
      this.chunks.push(b);
      this.have += b.length;
    }
    return this.have >= n;
  }

  /** Up to `max` bytes (at least 1), or null at the end. */
  async some(max: number): Promise<Buffer | null> {
    if (!(await this.fill(1))) return null;
    const first = this.chunks[0]!;
    if (first.length <= max) {
      this.chunks.shift();
      this.have -= first.length;
      return first;
    }
    this.chunks[0] = first.subarray(max);
    this.have -= max;
    return first.subarray(0, max);
  }

  /** Exactly n bytes, or null at the end before any; throws on a partial read. */
  async exact(n: number): Promise<Buffer | null> {
    if (!(await this.fill(n))) {
      if (this.have === 0) return null;
      throw new ArchiveError('the archive ends inside a block');
    }
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    this.chunks = all.length > n ? [all.subarray(n)] : [];
    this.have -= n;
    return all.subarray(0, n);
  }

  async skip(n: number): Promise<void> {
    while (n > 0) {
      const b = await this.some(n);
      if (!b) throw new ArchiveError('the archive ends inside an entry');
      n -= b.length;
    }
  }

  async drain(): Promise<void> {
    while (await this.some(1 << 16));
  }
}

function cstring(buf: Buffer, off: number, len: number): string {
  const end = buf.indexOf(0, off);
  return buf.toString('utf8', off, end >= 0 && end < off + len ? end : off + len);
}

function number(buf: Buffer, off: number, len: number): number {
  if (buf[off]! & 0x80) {
    // GNU base-256, positive only.
    let v = 0;
    for (let i = off + 1; i < off + len; i++) v = v * 256 + buf[i]!;
    return v + (buf[off]! & 0x3f) * 256 ** (len - 1);
  }
  const s = cstring(buf, off, len).trim();
  if (s === '') return 0;
  if (!/^[0-7]+$/.test(s)) throw new ArchiveError(`a malformed number field ${JSON.stringify(s)}`);
  return parseInt(s, 8);
}

function checksumOk(h: Buffer): boolean {
  const want = number(h, 148, 8);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : h[i]!;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return want === unsigned || want === signed;
}

function parsePax(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(0x20, i);
    if (sp < 0) throw new ArchiveError('a malformed PAX header');
    const len = Number(data.toString('ascii', i, sp));
    if (!Number.isInteger(len) || len <= sp - i || i + len > data.length) throw new ArchiveError('a malformed PAX record');
    const rec = data.toString('utf8', sp + 1, i + len - 1);
    const eq = rec.indexOf('=');
    if (eq < 0) throw new ArchiveError('a malformed PAX record');
    out[rec.slice(0, eq)] = rec.slice(eq + 1);
    i += len;
  }
  return out;
}

/** The safe relative components of an archive name, or throws. `[]` is the directory itself. */
export function safeParts(name: string): string[] {
  if (name.startsWith('/')) throw new ArchiveError(`refused an absolute name ${JSON.stringify(name)}`);
  if (name.includes('\0')) throw new ArchiveError('refused a name with a NUL');
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new ArchiveError(`refused a name with a .. component ${JSON.stringify(name)}`);
  return parts;
}

/** Whether a symlink at `parts` pointing at `target` stays inside the directory (lexically). */
export function linkStaysInside(parts: string[], target: string): boolean {
  if (target === '' || target.startsWith('/')) return false;
  const stack = parts.slice(0, -1);
  for (const p of target.split('/')) {
    if (p === '' || p === '.') continue;
    if (p === '..') {
      if (!stack.length) return false;
      stack.pop();
    } else stack.push(p);
  }
  return true;
}

export interface ExtractStats {
  /** The archive's bytes. */
  bytes: number;
  entries: number;
  /** Devices, fifos and unknown types (never created). */
  skipped: number;
}

async function lstatOrNull(p: string) {
  try {
    return await fsp.lstat(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** Extracts a tar stream into `dir` (made if missing) under the rules above. */
export async function extractTar(source: AsyncIterable<Uint8Array>, dir: string): Promise<ExtractStats> {
  await fsp.mkdir(dir, { recursive: true });
  const root = await fsp.realpath(dir);
  const reader = new ChunkReader(source[Symbol.asyncIterator]());
  const stats: ExtractStats = { bytes: 0, entries: 0, skipped: 0 };
  const dirTimes: Array<{ p: string; mode: number; mtime: number }> = [];
  let pax: Record<string, string> = {};
  let longName: string | undefined;
  let longLink: string | undefined;

  // The parent directories of parts, made as needed; refuses a symlink or non-directory on the way.
  const parents = async (parts: string[], make = true) => {
    let p = root;
    for (const part of parts.slice(0, -1)) {
      p = path.join(p, part);
      const st = await lstatOrNull(p);
      if (!st && !make) return null;
      if (!st) await fsp.mkdir(p, { mode: 0o755 });
      else if (st.isSymbolicLink()) throw new ArchiveError(`refused an entry below the symlink ${path.relative(root, p)}`);
      else if (!st.isDirectory()) throw new ArchiveError(`refused an entry below the non-directory ${path.relative(root, p)}`);
    }
    return path.join(root, ...parts);
  };
  // Makes room for a non-directory at p: removes a non-directory there.
  const clear = async (p: string, name: string) => {
    const st = await lstatOrNull(p);
    if (st?.isDirectory()) throw new ArchiveError(`refused to replace the directory ${name}`);
    if (st) await fsp.unlink(p);
  };

  try {
    for (;;) {
      const h = await reader.exact(BLOCK);
      if (!h || h.every((b) => b === 0)) break;
      if (!checksumOk(h)) throw new ArchiveError('a header with a bad checksum (not a tar archive?)');
      const type = String.fromCharCode(h[156]!) || '0';
      const ustar = h.toString('ascii', 257, 262) === 'ustar';
      let size = number(h, 124, 12);
      if (pax.size !== undefined) size = Number(pax.size);
      if (!Number.isSafeInteger(size) || size < 0) throw new ArchiveError('a malformed size');
      const prefix = ustar ? cstring(h, 345, 155) : '';
      let name = longName ?? pax.path ?? (prefix ? `${prefix}/${cstring(h, 0, 100)}` : cstring(h, 0, 100));
      const linkname = longLink ?? pax.linkpath ?? cstring(h, 157, 100);
      const mtime = pax.mtime !== undefined ? Math.floor(Number(pax.mtime)) : number(h, 136, 12);
      const mode = number(h, 100, 8) & 0o1777;
      const t = type === '\0' ? '0' : type;

      if (t === 'x' || t === 'g' || t === 'L' || t === 'K') {
        if (size > 1 << 20) throw new ArchiveError('an extended header over 1 MiB');
        const data = size ? await reader.exact(size + padding(size)) : Buffer.alloc(0);
        if (!data) throw new ArchiveError('the archive ends inside an extended header');
        const body = data.subarray(0, size);
        if (t === 'x') pax = { ...pax, ...parsePax(body) };
        else if (t === 'L') longName = cstring(body, 0, body.length);
        else if (t === 'K') longLink = cstring(body, 0, body.length);
        continue;
      }
      pax = {};
      longName = undefined;
      longLink = undefined;

      const parts = safeParts(name);
      name = parts.join('/');
      const dataLen = size + padding(size);
      if (!parts.length) {
        // The directory itself (`./`): nothing to make.
        await reader.skip(dataLen);
        continue;
      }
      if (t === '0' || t === '7') {
        const p = (await parents(parts))!;
        await clear(p, name);
        const fh = await fsp.open(p, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
        try {
          let left = size;
          while (left > 0) {
            const b = await reader.some(left);
            if (!b) throw new ArchiveError(`the archive ends inside ${name}`);
            await fh.write(b);
            left -= b.length;
          }
          await fh.chmod(mode & 0o777 | (mode & 0o1000));
        } finally {
          await fh.close();
        }
        await reader.skip(padding(size));
        await fsp.utimes(p, mtime, mtime);
      } else if (t === '5') {
        const p = (await parents(parts))!;
        const st = await lstatOrNull(p);
        if (st && !st.isDirectory()) await fsp.unlink(p);
        if (!st || !st.isDirectory()) await fsp.mkdir(p, { mode: 0o700 });
        await fsp.chmod(p, 0o700);
        dirTimes.push({ p, mode, mtime });
        await reader.skip(dataLen);
      } else if (t === '2') {
        if (!linkStaysInside(parts, linkname)) throw new ArchiveError(`refused the symlink ${name} -> ${linkname}: it may lead out`);
        const p = (await parents(parts))!;
        await clear(p, name);
        await fsp.symlink(linkname, p);
        await fsp.lutimes(p, mtime, mtime).catch(() => {});
        await reader.skip(dataLen);
      } else if (t === '1') {
        const targetParts = safeParts(linkname);
        if (!targetParts.length) throw new ArchiveError(`refused the hard link ${name} to the directory itself`);
        const target = await parents(targetParts, false);
        const tst = target === null ? null : await lstatOrNull(target);
        if (!tst || !tst.isFile()) throw new ArchiveError(`refused the hard link ${name}: ${linkname} is not a file extracted here`);
        const p = (await parents(parts))!;
        await clear(p, name);
        await fsp.link(target!, p).catch(() => fsp.copyFile(target!, p, fsc.COPYFILE_EXCL));
        await reader.skip(dataLen);
      } else {
        stats.skipped++;
        await reader.skip(dataLen);
        continue;
      }
      stats.entries++;
    }
    await reader.drain();
  } finally {
    for (const d of dirTimes.reverse()) {
      await fsp.chmod(d.p, d.mode & 0o777 | (d.mode & 0o1000)).catch(() => {});
      await fsp.utimes(d.p, d.mtime, d.mtime).catch(() => {});
    }
  }
  stats.bytes = reader.bytes;
  return stats;
}

// Shared by the tests: tree walking and comparing, a tiny tar header
// maker for hostile archives, a local HTTP stub, the real tar command.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import * as os from 'node:os';

export function tmpdir(prefix = 'sbx-ts-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Every byte value, `times` over. */
export function allBytes(times = 1) {
  const one = Buffer.from([...Array(256).keys()]);
  return Buffer.concat(Array(times).fill(one));
}

/** A tree as {relative name: description}, symlinks not followed. */
export function walk(root, rel = '', out = {}) {
  for (const n of fs.readdirSync(path.join(root, rel)).sort()) {
    const name = rel ? `${rel}/${n}` : n;
    const full = path.join(root, name);
    const st = fs.lstatSync(full);
    if (st.isSymbolicLink()) out[name] = `link -> ${fs.readlinkSync(full)}`;
    else if (st.isDirectory()) {
      out[name] = `dir ${(st.mode & 0o777).toString(8)}`;
      walk(root, name, out);
    } else out[name] = `file ${(st.mode & 0o777).toString(8)} ${fs.readFileSync(full).toString('base64')}`;
  }
  return out;
}

/** The names (and link targets) `tar -tv` sees in an archive file or buffer. */
export function tarNames(archive) {
  const out = execFileSync('tar', ['-tvf', '-'], { input: archive }).toString();
  return out.trim().split('\n').filter(Boolean).map((l) => {
    const m = l.match(/^(\S)\S*\s+\S+\s+\d+\s+\S+\s+\S+\s+(.*)$/);
    return m ? `${m[1]} ${m[2]}` : l;
  }).sort();
}

/** A small tree with a file of every byte value, a nested dir, an empty dir and symlinks. */
export function makeTree(root) {
  fs.mkdirSync(path.join(root, 'sub/deep'), { recursive: true });
  fs.mkdirSync(path.join(root, 'empty'));
  fs.writeFileSync(path.join(root, 'a.txt'), 'héllo\n');
  fs.writeFileSync(path.join(root, 'sub/b.bin'), allBytes(3));
  fs.writeFileSync(path.join(root, 'sub/deep/c.sh'), '#!/bin/sh\necho c\n');
  fs.chmodSync(path.join(root, 'sub/deep/c.sh'), 0o755);
  fs.symlinkSync('sub/b.bin', path.join(root, 'link'));
  fs.symlinkSync('sub', path.join(root, 'dirlink'));
  const long = 'n'.repeat(120);
  fs.mkdirSync(path.join(root, 'sub', long));
  fs.writeFileSync(path.join(root, 'sub', long, 'x'.repeat(150)), 'long name\n');
}

function octal(h, off, len, v) {
  h.write(v.toString(8).padStart(len - 1, '0') + '\0', off, len, 'ascii');
}

/** One ustar entry (header + padded data), for hand-made archives. */
export function tarEntry(name, { type = '0', data = Buffer.alloc(0), linkname = '', mode = 0o644 } = {}) {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100);
  octal(h, 100, 8, mode);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, data.length);
  octal(h, 136, 12, 1700000000);
  h.fill(0x20, 148, 156);
  h.write(type, 156, 1);
  h.write(linkname, 157, 100);
  h.write('ustar\0', 257);
  h.write('00', 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8);
  const pad = Buffer.alloc((512 - (data.length % 512)) % 512);
  return Buffer.concat([h, data, pad]);
}

export function tarOf(...entries) {
  return Buffer.concat([...entries, Buffer.alloc(1024)]);
}

/**
 * A stub HTTP server: `handler(req, body, n)` for the n-th request (from 1)
 * answers; every request is recorded with its headers and body.
 */
export async function stubServer(handler, listenArg = 0) {
  const requests = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    requests.push({ method: req.method, url: req.url, headers: req.headers, body: body.toString(), at: Date.now() });
    await handler(req, res, body, requests.length);
  });
  await new Promise((resolve) => server.listen(listenArg, '127.0.0.1', resolve));
  const close = () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); });
  return { server, requests, port: server.address().port, close };
}

export function json(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function apiError(res, status, code, extra = {}, headers = {}) {
  json(res, status, { ok: false, status, code, message: `stub ${code}`, requestId: 'req_00000000000000aa', ...extra }, headers);
}

export const SANDBOX = {
  id: 'sbx_0123456789abcdef', name: 'stub', state: 'running', host: 'stub', from: 'default', size: 'small', cpus: 1,
  memoryMib: 1024, diskGib: 8, labels: {}, envNames: [], noEnv: false, createdAt: '2026-01-01T00:00:00.000Z',
  startedAt: null, lastActivityAt: '2026-01-01T00:00:00.000Z', autoStopAt: null, ttlSeconds: null, idleMinutes: null,
  egress: 'internet', egressAllow: [], network: null,
};

// Level 0: the SDK against sbxd's real server and API over a real sbx-agent
// on this host (sbxd_guest_fixture; test/fixture_test.sh starts it): sbx_run
// runs (its "guest" is this host, the agent runs as the tester), sbx_off is
// stopped. Skipped unless SBX_FIXTURE_SOCKET is set.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import {
  Sandboxer, Sandbox, Process, NotFoundError, InvalidStateError, ForbiddenError, UnauthorizedError, InvalidArgumentError,
  NotImplementedError, SandboxerError, ConnectionError, packDir,
} from '../dist/index.js';
import { allBytes, makeTree, walk, tarNames } from './helpers.mjs';

const env = process.env;
const skip = env.SBX_FIXTURE_SOCKET ? false : 'no fixture (run test/fixture_test.sh)';
const user = String(process.getuid());
const u = { user };

describe('sbxd guest fixture', { skip }, () => {
  let unix, tcp, sb, off, dir, attempts;
  before(() => {
    attempts = [];
    unix = new Sandboxer({ host: `unix:${env.SBX_FIXTURE_SOCKET}`, apiKey: 'ignored-on-unix' });
    unix.transport.onAttempt = (a) => attempts.push(a);
    tcp = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: env.SBX_FIXTURE_KEY_HOST });
    sb = unix.sandbox('sbx_run');
    off = unix.sandbox('sbx_off');
    dir = fs.mkdtempSync(path.join(env.SBX_FIXTURE_DIR, 'guest-'));
  });

  test('health and get, on the socket and on TCP with a key', async () => {
    assert.equal((await unix.health()).ok, true);
    assert.equal((await tcp.health()).ok, true);
    const got = await tcp.get('sbx_run');
    assert.ok(got instanceof Sandbox);
    assert.equal(got.state, 'running');
    assert.equal((await sb.refresh()).id, 'sbx_run');
    assert.equal(sb.state, 'running');
  });

  test('exec: exit code, stdout, stderr; argv, env, cwd', async () => {
    let r = await sb.exec('echo hi; echo oops >&2; exit 3', u);
    assert.deepEqual([r.exitCode, r.signal, r.timedOut, r.stdout.toString(), r.stderr.toString()], [3, null, false, 'hi\n', 'oops\n']);
    assert.ok(Buffer.isBuffer(r.stdout) && r.pid > 0);
    r = await sb.exec(['sh', '-c', 'printf "%s|%s" "$FOO" "$(pwd)"'], { ...u, env: { FOO: 'bar baz' }, cwd: dir });
    assert.equal(r.stdout.toString(), `bar baz|${fs.realpathSync(dir)}`);
    r = await sb.exec(['/no/such/program'], u);
    assert.equal(r.exitCode, 127);
  });

  test('exec: binary-safe both ways (every byte value), stdin', async () => {
    const bytes = allBytes(64);
    let r = await sb.exec(['cat'], { ...u, stdin: bytes });
    assert.ok(r.stdout.equals(bytes), 'stdin -> stdout, every byte');
    r = await sb.exec(['cat'], { ...u, stdin: 'from stdin\n' });
    assert.equal(r.stdout.toString(), 'from stdin\n');
    fs.writeFileSync(path.join(dir, 'big.bin'), allBytes(4096));
    const chunks = [];
    const types = [];
    for await (const ev of sb.execStream(['sh', '-c', `cat ${dir}/big.bin; cat ${dir}/big.bin >&2`], u)) {
      types.push(ev.type);
      if (ev.type === 'stdout') chunks.push(ev.data);
    }
    assert.equal(types[0], 'start');
    assert.equal(types.at(-1), 'exit');
    assert.ok(Buffer.concat(chunks).equals(allBytes(4096)), 'streamed stdout, every byte');
    assert.ok(types.filter((t) => t === 'stderr').length >= 1);
  });

  test('execStream: events as they come, not at the end', async () => {
    const t0 = Date.now();
    const seen = [];
    for await (const ev of sb.execStream('echo a; sleep 1; echo b >&2; exit 4', u)) seen.push([ev.type, Date.now() - t0, ev.data?.toString()]);
    const a = seen.find((s) => s[0] === 'stdout');
    const b = seen.find((s) => s[0] === 'stderr');
    const exit = seen.at(-1);
    assert.equal(a[2], 'a\n');
    assert.equal(b[2], 'b\n');
    assert.ok(b[1] - a[1] >= 700, `a at ${a[1]} ms, b at ${b[1]} ms`);
    assert.equal(exit[0], 'exit');
    // Leaving the loop early ends the command.
    const marker = path.join(dir, 'early');
    for await (const ev of sb.execStream(`echo go; sleep 2; touch ${marker}`, u)) if (ev.type === 'stdout') break;
    await new Promise((r) => setTimeout(r, 2500));
    assert.equal(fs.existsSync(marker), false, 'the command was killed when the stream closed');
  });

  test('exec: a timeout kills it (timedOut, signal 9)', async () => {
    const r = await sb.exec(['sleep', '30'], { ...u, timeoutMs: 500 });
    assert.deepEqual([r.timedOut, r.signal, r.exitCode], [true, 9, null]);
  });

  test('typed errors: 404, 409, 403 (scoped key), 401 (bad key), 403 (read-only key), 501; none retried', async () => {
    const first = attempts.length;
    await assert.rejects(unix.get('sbx_nope'), (e) => e instanceof NotFoundError && e.status === 404 && e.code === 'not_found' && /^req_/.test(e.requestId));
    await assert.rejects(unix.sandbox('sbx_nope').exec('true', u), NotFoundError);
    await assert.rejects(off.exec('true', u), (e) => e instanceof InvalidStateError && e.status === 409 && e instanceof SandboxerError);
    assert.equal(attempts.length - first, 3, 'one attempt each');
    const scoped = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: env.SBX_FIXTURE_KEY_SCOPED });
    assert.equal((await scoped.sandbox('sbx_run').exec('echo scoped', u)).stdout.toString(), 'scoped\n');
    await assert.rejects(scoped.sandbox('sbx_off').exec('true', u), (e) => e instanceof ForbiddenError && e.status === 403);
    await assert.rejects(scoped.list(), ForbiddenError);
    const bad = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: 'sbxk_0000' });
    await assert.rejects(bad.get('sbx_run'), (e) => e instanceof UnauthorizedError && e.status === 401);
    await assert.rejects(new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: '' }).health(), UnauthorizedError);
    const read = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: env.SBX_FIXTURE_KEY_READ });
    assert.equal((await read.get('sbx_run')).id, 'sbx_run');
    await assert.rejects(read.sandbox('sbx_run').exec('true', u), ForbiddenError);
    const before501 = attempts.length;
    await assert.rejects(unix.create({ cpus: 1 }), NotImplementedError);
    await assert.rejects(sb.stop(), NotImplementedError);
    assert.equal(attempts.length - before501, 2, '501 is not retried');
    await assert.rejects(sb.exec('true', { ...u, cwd: '/no/such/dir' }), NotFoundError);
    await assert.rejects(new Sandboxer({ host: `unix:${env.SBX_FIXTURE_DIR}/nope.sock` }).health(), ConnectionError);
  });

  test('API keys: create (host-wide, scoped, read-only with expiry), list without secrets, use over TCP, delete', async () => {
    const made = [];
    const create = async (opts) => {
      const key = await unix.keys.create(opts);
      made.push(key.id);
      return key;
    };
    try {
      const host = await create({ name: 'sdk host' });
      assert.match(host.id, /^key_/);
      assert.match(host.secret, /^sbxk_[0-9a-f]{64}$/);
      assert.deepEqual([host.name, host.sandboxId, host.readOnly, host.expiresAt], ['sdk host', null, false, null]);
      await assert.rejects(unix.keys.create({ sandboxId: 'sbx_nope' }), (e) => e instanceof NotFoundError && e.status === 404 && e.code === 'not_found');
      await assert.rejects(unix.keys.create({ expiresInSeconds: 0 }), InvalidArgumentError);

      const read = await create({ name: 'sdk read', readOnly: true, expiresInSeconds: 3600 });
      assert.deepEqual([read.name, read.sandboxId, read.readOnly], ['sdk read', null, true]);
      assert.equal(Date.parse(read.expiresAt) - Date.parse(read.createdAt), 3600 * 1000);
      assert.ok(Math.abs(Date.parse(read.createdAt) - Date.now()) < 5 * 60 * 1000, read.createdAt);
      const scoped = await create({ sandboxId: 'sbx_run' });
      assert.deepEqual([scoped.name, scoped.sandboxId, scoped.readOnly, scoped.expiresAt], ['', 'sbx_run', false, null]);
      assert.equal(new Set([host.secret, read.secret, scoped.secret]).size, 3);

      const listed = await unix.keys.list();
      const byId = new Map(listed.map((k) => [k.id, k]));
      assert.ok([host.id, read.id, scoped.id].every((id) => byId.has(id)));
      const times = listed.map((k) => k.createdAt);
      assert.deepEqual(times, [...times].sort(), 'oldest first');
      const made = listed.map((k) => k.id).filter((id) => [host.id, read.id, scoped.id].includes(id));
      assert.deepEqual(made, [host.id, read.id, scoped.id], 'in the order they were made');
      const { secret: _, ...readInfo } = read;
      assert.deepEqual(byId.get(read.id), readInfo);
      const everything = JSON.stringify(listed);
      assert.ok(!everything.includes('secret'), everything);
      for (const k of [host, read, scoped]) assert.ok(!everything.includes(k.secret.slice('sbxk_'.length)));

      const asRead = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: read.secret });
      assert.deepEqual((await asRead.list()).map((s) => s.id).sort(), ['sbx_off', 'sbx_run']);
      assert.ok((await asRead.keys.list()).some((k) => k.id === read.id), 'a read-only key may list keys');
      await assert.rejects(asRead.keys.create({ name: 'from a read-only key' }), (e) => e instanceof ForbiddenError && e.status === 403 && e.code === 'forbidden');
      await assert.rejects(asRead.keys.delete(host.id), ForbiddenError);
      const asScoped = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: scoped.secret });
      assert.equal((await asScoped.get('sbx_run')).state, 'running');
      await assert.rejects(asScoped.keys.list(), ForbiddenError, "a sandbox's key sees no keys");
      const asHost = new Sandboxer({ host: env.SBX_FIXTURE_TCP, apiKey: host.secret });
      assert.equal((await asHost.get('sbx_off')).state, 'stopped');

      assert.equal(await unix.keys.delete(read.id), undefined);
      assert.ok(!(await unix.keys.list()).some((k) => k.id === read.id));
      await assert.rejects(asRead.list(), (e) => e instanceof UnauthorizedError && e.status === 401 && e.code === 'unauthorized');
      await assert.rejects(unix.keys.delete(read.id), NotFoundError);
    } finally {
      for (const id of made) await unix.keys.delete(id).catch((e) => { if (!(e instanceof NotFoundError)) throw e; });
    }
  });

  test('detached process: attach from an offset loses and repeats nothing (400 lines)', async () => {
    const p = await sb.start(`i=1; while [ $i -le 400 ]; do printf 'line %03d\\n' $i; i=$((i+1)); if [ $((i % 20)) -eq 0 ]; then sleep 0.05; fi; done`, u);
    assert.ok(p instanceof Process && p.id && p.pid > 0);
    const want = Array.from({ length: 400 }, (_, i) => `line ${String(i + 1).padStart(3, '0')}\n`).join('');
    let got = Buffer.alloc(0);
    let next = 0;
    for await (const ev of p.attach({ offset: 0 })) {
      assert.equal(ev.type, 'output');
      assert.equal(ev.offset, next, 'contiguous');
      got = Buffer.concat([got, ev.data]);
      next = ev.nextOffset;
      if (next >= 1200) break;
    }
    assert.ok(next >= 1200 && next < want.length, `read ${next} bytes before leaving`);
    let exit;
    for await (const ev of p.attach({ offset: next })) {
      if (ev.type === 'exit') exit = ev;
      else {
        assert.equal(ev.offset, next);
        got = Buffer.concat([got, ev.data]);
        next = ev.nextOffset;
      }
    }
    assert.equal(got.toString(), want);
    assert.deepEqual(exit, { type: 'exit', exitCode: 0, signal: null, timedOut: false });
    const st = await p.status();
    assert.deepEqual([st.running, st.exitCode, st.outputBytes], [false, 0, want.length]);
    assert.equal(st.tail.toString(), want.slice(-st.tail.length));
    // From a middle offset to the end; past the end is invalid_argument.
    const mid = await p.output({ offset: 2000 });
    assert.equal(mid.data.toString(), want.slice(2000));
    assert.deepEqual([mid.running, mid.exitCode, mid.nextOffset], [false, 0, want.length]);
    await assert.rejects(p.output({ offset: want.length + 1 }), InvalidArgumentError);
    assert.ok((await sb.processes()).some((x) => x.id === p.id));
  });

  test('output follow:false while it runs: what is there now, then poll from nextOffset', async () => {
    const p = await sb.start('echo first; sleep 1.5; echo second', u);
    await new Promise((r) => setTimeout(r, 400));
    const now = await p.output({ offset: 0, follow: false });
    assert.deepEqual([now.data.toString(), now.running, now.nextOffset], ['first\n', true, 6]);
    const rest = await p.output({ offset: now.nextOffset, follow: true });
    assert.deepEqual([rest.data.toString(), rest.running, rest.exitCode], ['second\n', false, 0]);
    assert.deepEqual(await p.wait(), { exitCode: 0, signal: null, timedOut: false });
  });

  test('writeStdin to cat, then eof; without stdinOpen it is invalid_argument', async () => {
    const p = await sb.start(['cat'], { ...u, stdinOpen: true });
    let r = await p.writeStdin('hello\n');
    assert.deepEqual(r, { written: 6, open: true });
    const big = allBytes(4096); // 1 MiB: more than a pipe holds, sent in pieces as cat reads
    r = await p.writeStdin(big);
    assert.equal(r.written, big.length);
    r = await p.writeStdin('bye\n', { eof: true });
    assert.equal(r.written, 4);
    assert.deepEqual(await p.wait(), { exitCode: 0, signal: null, timedOut: false });
    const out = await p.output();
    assert.ok(out.data.equals(Buffer.concat([Buffer.from('hello\n'), big, Buffer.from('bye\n')])));
    const q = await sb.start(['sleep', '5'], u);
    await assert.rejects(q.writeStdin('x'), InvalidArgumentError);
    await q.kill();
  });

  test('signal: TERM reaches the process group; delivered false once it exited', async () => {
    const p = await sb.start(['sleep', '60'], u);
    assert.equal(await p.signal('TERM'), true);
    const end = await p.wait();
    assert.deepEqual([end.exitCode, end.signal], [null, 15]);
    assert.equal(await p.signal('SIGKILL'), false);
    await assert.rejects(sb.process('p0000000000000000').status(), NotFoundError);
  });

  test('files: write, read, stat, list, mkdir, remove, streams, download/upload', async () => {
    const f = sb.files;
    assert.equal(await f.write(`${dir}/a.txt`, 'héllo\n'), 7);
    assert.equal(await f.readText(`${dir}/a.txt`), 'héllo\n');
    const bytes = allBytes(1);
    assert.equal(await f.write(`${dir}/b.bin`, bytes, { mode: 0o600 }), 256);
    assert.ok((await f.readBytes(`${dir}/b.bin`)).equals(bytes));
    const st = await f.stat(`${dir}/b.bin`);
    assert.deepEqual([st.type, st.size, st.mode & 0o777], ['file', 256, 0o600]);
    await f.mkdir(`${dir}/d1/d2/d3`);
    await f.mkdir(`${dir}/d1/d2/d3`);
    assert.equal((await f.stat(`${dir}/d1/d2`)).type, 'dir');
    const names = (await f.list(dir)).map((e) => e.name);
    assert.ok(['a.txt', 'b.bin', 'd1'].every((n) => names.includes(n)), names.join());
    assert.equal((await f.list(dir)).find((e) => e.name === 'b.bin').size, 256);
    await assert.rejects(f.readBytes(`${dir}/missing`), NotFoundError);
    await assert.rejects(f.readBytes(dir), InvalidArgumentError);
    await assert.rejects(f.remove(`${dir}/d1`), InvalidArgumentError);
    await f.remove(`${dir}/d1`, { recursive: true });
    assert.equal(await f.exists(`${dir}/d1`), false);
    assert.equal(await f.exists(`${dir}/a.txt`), true);
    await f.remove(`${dir}/a.txt`);
    // Streams both ways: 3 MiB from a generator, back as a stream.
    const big = allBytes(3 * 4096);
    async function* pieces() {
      for (let i = 0; i < big.length; i += 100000) yield big.subarray(i, i + 100000);
    }
    assert.equal(await f.write(`${dir}/big`, pieces()), big.length);
    const back = [];
    for await (const c of await f.readStream(`${dir}/big`)) back.push(c);
    assert.ok(Buffer.concat(back).equals(big));
    const local = path.join(env.SBX_FIXTURE_DIR, 'local-copy');
    assert.equal(await f.download(`${dir}/big`, local), big.length);
    assert.ok(fs.readFileSync(local).equals(big));
    fs.chmodSync(local, 0o640);
    assert.equal(await f.upload(local, `${dir}/up`), big.length);
    assert.equal((await f.stat(`${dir}/up`)).mode & 0o777, 0o640);
    assert.equal(await f.write(`${dir}/r`, Readable.from([Buffer.from('from a Readable')])), 15);
    await assert.rejects(off.files.write(`${dir}/x`, 'x'), (e) => e instanceof InvalidStateError || e instanceof SandboxerError);
  });

  test('uploadDir / downloadDir round trip with symlinks, against the real tar', async () => {
    const src = fs.mkdtempSync(path.join(env.SBX_FIXTURE_DIR, 'src-'));
    makeTree(src);
    const remote = `${dir}/tree/proj`;
    const up = await sb.files.uploadDir(src, remote);
    const want = walk(src);
    assert.equal(up.entries, Object.keys(want).length);
    assert.equal(up.sent.entries, up.entries);
    assert.equal(up.skipped, 0);
    assert.deepEqual(walk(remote), want, 'the guest tree is the local one');
    // What sbxd sends, as the real tar lists it, is what we pack, as it lists it.
    const res = await unix.transport.send({ method: 'GET', path: '/v1/sandboxes/sbx_run/files/tar', query: { path: remote } });
    const chunks = [];
    for await (const c of res) chunks.push(c);
    const sbxdArchive = Buffer.concat(chunks);
    const ours = [];
    for await (const c of packDir(src)) ours.push(c);
    assert.deepEqual(tarNames(sbxdArchive), tarNames(Buffer.concat(ours)));
    assert.deepEqual(tarNames(sbxdArchive), tarNames(execFileSync('tar', ['-C', remote, '-cf', '-', ...fs.readdirSync(remote).sort()])));
    // Down again into a fresh directory.
    const dest = path.join(env.SBX_FIXTURE_DIR, 'dest', 'proj');
    const down = await sb.files.downloadDir(remote, dest);
    assert.equal(down.entries, Object.keys(want).length);
    assert.equal(down.bytes, sbxdArchive.length);
    assert.deepEqual(walk(dest), want);
    // A file as the remote comes as one entry named by its last component.
    const one = path.join(env.SBX_FIXTURE_DIR, 'one');
    await sb.files.downloadDir(`${remote}/a.txt`, one);
    assert.deepEqual(fs.readdirSync(one), ['a.txt']);
    await assert.rejects(sb.files.downloadDir(`${dir}/missing`, one), NotFoundError);
  });

  test('list, find by labels and state, get', async () => {
    const all = await unix.list();
    assert.deepEqual(all.map((s) => s.id).sort(), ['sbx_off', 'sbx_run']);
    assert.ok(all.every((s) => s instanceof Sandbox && s.info));
    assert.deepEqual((await unix.list({ state: 'stopped' })).map((s) => s.id), ['sbx_off']);
    assert.deepEqual((await unix.list({ state: ['running', 'stopped'] })).length, 2);
    assert.deepEqual(await unix.find({ labels: { owner: 'nobody' } }), []);
    assert.deepEqual(await tcp.list({ labels: { owner: 'nobody' }, state: 'running' }), []);
    await assert.rejects(unix.find({ labels: {} }), TypeError);
    const off2 = await unix.get('sbx_off');
    assert.equal(off2.state, 'stopped');
    assert.deepEqual(off2.labels, {});
    assert.deepEqual(await unix.snapshots.list(), []);
    await assert.rejects(unix.snapshots.get('nope'), NotFoundError);
    assert.ok((await sb.history()).length > 0);
  });

  // One that runs: the nested harness; no desktop starts on this host.
  test('desktop: none running', async () => {
    const info = await sb.desktop.status();
    assert.deepEqual([info.running, info.display, info.width, info.vncPort, info.url], [false, null, null, null, null]);
    await assert.rejects(sb.desktop.screenshot(), InvalidStateError);
    await assert.rejects(sb.desktop.click(1, 2), InvalidStateError);
    await assert.rejects(sb.desktop.action({ action: 'dance' }), InvalidArgumentError);
    await assert.rejects(off.desktop.status(), InvalidStateError);
  });
});

// The live test: every SDK method once against a real sbxd with real VMs
// (the nested-virtualization harness). Skipped unless SBX_HOST is set
// (SBX_API_KEY too on TCP). Everything it makes carries the label
// sdk-test=<run id> and is deleted at the end, whatever failed.
// Each VM operation may take a minute under emulation: generous timeouts.
//   SBX_HOST=unix:/run/sandboxer/sbxd.sock node --test test/live.test.mjs
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { randomUUID } from 'node:crypto';
import * as https from 'node:https';
import { Sandboxer, Sandbox, NotFoundError, InvalidStateError, SandboxerError } from '../dist/index.js';
import { allBytes, makeTree, walk } from './helpers.mjs';

const skip = process.env.SBX_HOST ? false : 'SBX_HOST is not set (a real sbxd with VMs)';
const run = randomUUID().slice(0, 8);
const labels = { 'sdk-test': run };
const VM = { timeout: 15 * 60 * 1000 };
const small = { cpus: 1, memoryMib: 1024, labels };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('live sbxd', { skip, timeout: 60 * 60 * 1000 }, () => {
  let client, sb, counter;
  const snapName = `sdk-test-${run}`;

  before(async () => {
    client = new Sandboxer({ retryBaseMs: 1000 });
    assert.equal((await client.health()).ok, true);
  });

  after(async () => {
    if (!client) return;
    await client.deleteWhere({ labels }).catch((e) => console.error('cleanup:', e.message));
    await client.snapshots.delete(snapName).catch(() => {});
  });

  test('create small with labels; a retried create with the same key gives one sandbox', VM, async () => {
    const key = `sdk-test-${run}-create`;
    sb = await client.create({ ...small, idempotencyKey: key, ttl: '2h' });
    assert.ok(sb instanceof Sandbox);
    assert.equal(sb.state, 'running');
    assert.deepEqual([sb.info.cpus, sb.info.memoryMib, sb.labels], [1, 1024, labels]);
    assert.equal(sb.createResult.replayed, false);
    const again = await client.create({ ...small, idempotencyKey: key, ttl: '2h' });
    assert.equal(again.id, sb.id);
    assert.equal(again.createResult.replayed, true);
    assert.equal((await client.find({ labels })).length, 1);
  });

  test('exec, streaming, stdin, timeout', VM, async () => {
    let r = await sb.exec('echo hi; echo oops >&2; exit 3');
    assert.deepEqual([r.exitCode, r.stdout.toString(), r.stderr.toString()], [3, 'hi\n', 'oops\n']);
    r = await sb.exec(['cat'], { stdin: allBytes(16) });
    assert.ok(r.stdout.equals(allBytes(16)));
    const types = [];
    for await (const ev of sb.execStream('echo a; sleep 1; echo b')) types.push(ev.type);
    assert.deepEqual(types, ['start', 'stdout', 'stdout', 'exit']);
    r = await sb.exec(['sleep', '30'], { timeoutMs: 1000 });
    assert.equal(r.timedOut, true);
  });

  test('files and trees', VM, async () => {
    const f = sb.files;
    await f.mkdir('/root/sdk/d');
    assert.equal(await f.write('/root/sdk/a.txt', 'héllo\n', { mode: 0o600 }), 7);
    assert.equal(await f.readText('/root/sdk/a.txt'), 'héllo\n');
    assert.deepEqual((await f.list('/root/sdk')).map((e) => e.name), ['a.txt', 'd']);
    assert.equal((await f.stat('/root/sdk/a.txt')).mode & 0o777, 0o600);
    const src = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-live-'));
    const dest = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-live-'));
    try {
      makeTree(src);
      await f.uploadDir(src, '/root/sdk/tree');
      await f.downloadDir('/root/sdk/tree', dest);
      assert.deepEqual(walk(dest), walk(src));
    } finally {
      fs.rmSync(src, { recursive: true, force: true });
      fs.rmSync(dest, { recursive: true, force: true });
    }
    await f.remove('/root/sdk/tree', { recursive: true });
    assert.equal(await f.exists('/root/sdk/tree'), false);
  });

  test('a detached counter survives a stop with memory and a resume', VM, async () => {
    counter = await sb.start('i=0; while true; do echo $i; i=$((i+1)); sleep 1; done');
    await sleep(3000);
    const before = await counter.output();
    assert.equal(before.running, true);
    const stopped = await sb.stop({ memory: true });
    assert.equal(stopped.state, 'stopped');
    await assert.rejects(sb.exec('true'), InvalidStateError);
    // A stopped sandbox's files are read from its disk.
    assert.equal(await sb.files.readText('/root/sdk/a.txt'), 'héllo\n');
    const resumed = await sb.resume();
    assert.equal(resumed.state, 'running');
    assert.equal(resumed.memoryRestored, true);
    await sleep(3000);
    const st = await counter.status();
    assert.equal(st.running, true, 'the counter still counts');
    const after = await counter.output({ offset: before.nextOffset });
    const numbers = (before.data.toString() + after.data.toString()).trim().split('\n').map(Number);
    numbers.forEach((n, i) => assert.equal(n, i, 'no number lost or repeated'));
    assert.ok(numbers.length >= 5);
    // attach from an offset, then leave.
    for await (const ev of counter.attach({ offset: after.nextOffset })) if (ev.type === 'output') break;
  });

  test('fork with memory: the child has the counter too', VM, async () => {
    const kids = await sb.fork({ count: 1, memory: true });
    assert.equal(kids.length, 1);
    const kid = kids[0];
    assert.equal(kid.state, 'running');
    assert.deepEqual((await kid.refresh()).labels, labels);
    assert.equal((await kid.exec(['kill', '-0', String(counter.pid)])).exitCode, 0, 'the counter runs in the child');
    await kid.delete();
    await assert.rejects(kid.refresh(), NotFoundError);
  });

  test('snapshot, list, create from it (Symbol.asyncDispose deletes it)', VM, async () => {
    const snap = await sb.snapshot(snapName);
    assert.equal(snap.name, snapName);
    assert.ok((await client.snapshots.list()).some((s) => s.name === snapName));
    let id;
    // What `await using child = …` does (syntax Node 20 lacks).
    const child = await client.create({ from: snapName, labels });
    try {
      id = child.id;
      assert.equal(await child.files.readText('/root/sdk/a.txt'), 'héllo\n');
    } finally {
      await child[Symbol.asyncDispose]();
    }
    await assert.rejects(client.get(id), NotFoundError);
    await client.snapshots.delete(snapName);
    await assert.rejects(client.snapshots.get(snapName), NotFoundError);
  });

  test('hosted port URL, unhost', VM, async () => {
    await sb.start('python3 -m http.server 8080 --bind 0.0.0.0 || busybox httpd -f -p 8080');
    await sleep(2000);
    const url = await sb.hostPort(8080, { public: true });
    assert.match(url, /^https:\/\/.+-8080\./);
    assert.ok((await sb.hostedPorts()).some((h) => h.port === 8080));
    const ca = await client.ca().catch(() => undefined);
    if (ca) {
      const status = await new Promise((resolve) => {
        https.get(url, { ca }, (res) => { res.resume(); resolve(res.statusCode); }).on('error', () => resolve(0));
      });
      assert.ok(status === 200 || status === 0, `GET ${url}: ${status}`);
    }
    await sb.unhost(8080);
    await assert.rejects(sb.unhost(8080), NotFoundError);
  });

  test('typed errors 404 and 409; find; with() deletes', VM, async () => {
    await assert.rejects(client.get('sbx_0000000000000000'), (e) => e instanceof NotFoundError && e.status === 404);
    await assert.rejects(sb.resume(), (e) => e instanceof InvalidStateError && e.status === 409 && e instanceof SandboxerError);
    assert.ok((await client.find({ labels })).some((s) => s.id === sb.id));
    let inside;
    await Sandbox.with({ ...small, client }, async (tmp) => {
      inside = tmp.id;
      assert.equal((await tmp.exec('echo ok')).stdout.toString(), 'ok\n');
    });
    await assert.rejects(client.get(inside), NotFoundError);
  });

  test('delete', VM, async () => {
    await sb.delete();
    await assert.rejects(sb.refresh(), NotFoundError);
    assert.deepEqual(await client.find({ labels }), []);
  });
});

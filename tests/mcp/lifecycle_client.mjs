// A sandbox's whole life through `sbx mcp` and the official MCP SDK client
// (v1, 2025-11-25) against a real sbxd with real VMs
// (tests/guest/sbxd/mcp.sh): create (with the server's default labels),
// exec, files, a detached counter, a hosted port and handoff_session,
// stop with memory (a file read from the stopped disk), resume (the counter
// still counting), fork, a named snapshot, delete. One "ok: mcp: …" line a
// step; exits 1 at the first failure with "FAIL: mcp: …".
// Usage: node lifecycle_client.mjs SBX   (SBX_HOST in the environment), or
//        node lifecycle_client.mjs --url URL   (sbxd's /mcp: Streamable HTTP)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import assert from 'node:assert/strict';
import { call, callError } from './checks.mjs';

const args = process.argv.slice(2);
const http = args[0] === '--url';
const slow = 600000;  // a VM operation under the nested harness may take minutes
const client = new Client({ name: 'sandboxer-lifecycle-test', version: '1.0.0' });
// sbx mcp puts its defaults on what it creates; /mcp has none, so the
// HTTP run asks for the same labels and ttl itself.
await client.connect(http
  ? new StreamableHTTPClientTransport(new URL(args[1]))
  : new StdioClientTransport({ command: args[0], args: ['mcp', '--label', 'via=mcp', '--size', 'small', '--ttl', '2h'],
    env: { ...process.env }, stderr: 'inherit' }));
const door = http ? 'mcp-http' : 'mcp';

let step = 'start';
const ok = (what) => console.log(`ok: ${door}: ${what}`);
const count = async (id) => Number((await call(client, 'read_file', { sandbox: id, path: '/root/count' })).content);
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
let id, child;
try {
  step = 'sandbox_create';
  const made = await call(client, 'sandbox_create', { cpus: 1, memoryMib: 1024, labels: { test: 'mcp', ...(http ? { via: 'mcp' } : {}) },
    ...(http ? { ttl: '2h' } : {}) }, slow);
  id = made.sandbox.id;
  assert.equal(made.sandbox.state, 'running');
  assert.deepEqual(made.sandbox.labels, { test: 'mcp', via: 'mcp' });
  assert.equal(made.sandbox.ttlSeconds, 7200);
  ok(`sandbox_create ${id} with the labels and ttl${http ? '' : " of sbx mcp's defaults"}`);

  step = 'exec';
  const r = await call(client, 'exec', { sandbox: id, shell: 'cat /etc/os-release | head -1; id -u' }, slow);
  assert.equal(r.exitCode, 0);
  assert.match(r.stdout, /^PRETTY_NAME=.*\n0\n$/);
  ok('exec in the guest as root');

  step = 'files';
  await call(client, 'write_file', { sandbox: id, path: '/root/mcp.txt', content: 'written through MCP\n' }, slow);
  assert.equal((await call(client, 'read_file', { sandbox: id, path: '/root/mcp.txt' }, slow)).content, 'written through MCP\n');
  assert.ok((await call(client, 'list_files', { sandbox: id, path: '/root' }, slow)).entries.some((e) => e.name === 'mcp.txt'));
  ok('write_file, read_file, list_files');

  step = 'exec_start';
  const counter = await call(client, 'exec_start', { sandbox: id,
    shell: 'i=0; while :; do i=$((i+1)); echo $i > /root/count.new; mv /root/count.new /root/count; sleep 0.2; done' }, slow);
  const web = await call(client, 'exec_start', { sandbox: id, command: ['python3', '-m', 'http.server', '8000'], cwd: '/root' }, slow);
  for (let i = 0; i < 100; i++) {  // the counter's first write
    const r = await client.callTool({ name: 'read_file', arguments: { sandbox: id, path: '/root/count' } }, undefined, { timeout: slow });
    if (!r.isError) break;
    await sleep(200);
  }
  ok(`exec_start: a counter (${counter.process}) and a web server (${web.process})`);

  step = 'host_port';
  const hosted = (await call(client, 'host_port', { sandbox: id, port: 8000 }, slow)).hostedPort;
  assert.match(hosted.url, /^https:\/\/[a-z0-9]+-8000\./);
  assert.ok(hosted.tokenUrl.includes('_token='));
  const handoff = await call(client, 'handoff_session', { sandbox: id }, slow);
  assert.ok(handoff.ssh.endsWith(`ssh ${id}`), handoff.ssh);
  assert.equal(handoff.hostedPorts[0].url, hosted.url);
  ok(`host_port ${hosted.url}, handoff_session`);

  step = 'sandbox_stop';
  const before = await count(id);
  assert.equal((await call(client, 'sandbox_stop', { sandbox: id }, slow)).sandbox.state, 'stopped');
  assert.equal((await call(client, 'read_file', { sandbox: id, path: '/root/mcp.txt' }, slow)).content, 'written through MCP\n');
  assert.equal((await callError(client, 'exec', { sandbox: id, shell: 'true' }, slow)).code, 'invalid_state');
  ok(`sandbox_stop with memory (counter at ${before}); read_file from the stopped disk; exec refused`);

  step = 'sandbox_resume';
  const resumed = await call(client, 'sandbox_resume', { sandbox: id }, slow);
  assert.equal(resumed.memoryRestored, true, JSON.stringify(resumed));
  const st = await call(client, 'exec_status', { sandbox: id, process: counter.process }, slow);
  assert.equal(st.running, true);
  const at = await count(id);
  await sleep(2000);
  const later = await count(id);
  assert.ok(at >= before && later > at, `counter ${before} -> ${at} -> ${later}`);
  ok(`sandbox_resume from memory: the same counter process goes on (${before} -> ${later})`);

  step = 'sandbox_fork';
  const forked = await call(client, 'sandbox_fork', { sandbox: id, count: 1 }, slow);
  child = forked.sandboxes[0].id;
  assert.equal((await call(client, 'exec', { sandbox: child, shell: 'cat /root/mcp.txt' }, slow)).stdout, 'written through MCP\n');
  const listed = (await call(client, 'sandbox_list', { labels: { test: 'mcp' } }, slow)).sandboxes.map((s) => s.id).sort();
  assert.deepEqual(listed, [id, child].sort());
  assert.deepEqual((await call(client, 'sandbox_delete', { sandbox: child }, slow)).deleted, [child]);
  child = undefined;
  ok('sandbox_fork: the child has the file; sandbox_list by label; the child deleted');

  step = 'snapshots';
  assert.equal((await call(client, 'snapshot_create', { sandbox: id, name: 'mcp-snap' }, slow)).snapshot.name, 'mcp-snap');
  assert.ok((await call(client, 'snapshot_list', {}, slow)).snapshots.some((s) => s.name === 'mcp-snap'));
  await call(client, 'snapshot_delete', { name: 'mcp-snap' }, slow);
  assert.ok(!(await call(client, 'snapshot_list', {}, slow)).snapshots.some((s) => s.name === 'mcp-snap'));
  ok('snapshot_create, snapshot_list, snapshot_delete');

  step = 'sandbox_delete';
  await call(client, 'unhost_port', { sandbox: id, port: 8000 }, slow);
  assert.deepEqual((await call(client, 'sandbox_delete', { sandbox: id }, slow)).deleted, [id]);
  assert.equal((await callError(client, 'sandbox_get', { sandbox: id }, slow)).code, 'not_found');
  id = undefined;
  ok('unhost_port, sandbox_delete, then sandbox_get is not_found');
} catch (e) {
  console.log(`FAIL: ${door}: ${step}: ${e.message}`.slice(0, 2000));
  for (const s of [child, id]) {
    if (s) await client.callTool({ name: 'sandbox_delete', arguments: { sandbox: s } }, undefined, { timeout: slow }).catch(() => {});
  }
  await client.close();
  process.exit(1);
}
await client.close();

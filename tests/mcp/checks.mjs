// The checks every MCP client test runs (tests/mcp/README.md), whatever the
// transport: a connected client of the official MCP SDK (v1 or v2) in,
// failures out. `sandbox` is a running sandbox, `dir` a directory in it
// the test may write to, `user` who runs commands (the fixture's agent
// runs as the tester, a real guest's as root).
import assert from 'node:assert/strict';

export const TOOLS = ['sandbox_create', 'sandbox_list', 'sandbox_get', 'sandbox_delete', 'sandbox_stop',
  'sandbox_resume', 'sandbox_fork', 'exec', 'exec_start', 'exec_status', 'exec_output', 'exec_signal', 'write_stdin',
  'read_file', 'write_file', 'list_files', 'host_port', 'unhost_port', 'snapshot_create', 'snapshot_list',
  'snapshot_delete', 'handoff_session', 'desktop_start', 'desktop_status', 'desktop_action'];

// A tool's structured result; throws with the tool error's text.
// `timeout`: the client's wait in ms (the SDK's default is 60 s).
export async function call(client, name, args, timeout = 60000) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout });
  if (r.isError) {
    const e = new Error(`${name}: ${r.content?.[0]?.text}`);
    e.toolError = JSON.parse(r.content[0].text).error;
    throw e;
  }
  assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent, `${name}: text and structured content`);
  return r.structuredContent;
}

// The tool error's {code, message}; fails when the call succeeds.
export async function callError(client, name, args, timeout = 60000) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout });
  assert.equal(r.isError, true, `${name} ${JSON.stringify(args)} should fail: ${JSON.stringify(r)}`);
  return JSON.parse(r.content[0].text).error;
}

export async function checkTools(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of TOOLS) assert.ok(names.includes(want), `tools/list lacks ${want}`);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.equal(t.outputSchema?.type, 'object', t.name);
    assert.ok(t.description.length > 20, t.name);
  }
  const exec = tools.find((t) => t.name === 'exec');
  assert.equal(exec.annotations.readOnlyHint, false);
  assert.equal(tools.find((t) => t.name === 'read_file').annotations.readOnlyHint, true);
  assert.equal(tools.find((t) => t.name === 'sandbox_delete').annotations.destructiveHint, true);
  return tools.length;
}

export async function checkExecAndFiles(client, { sandbox, dir, user }) {
  const u = user ? { user } : {};
  let r = await call(client, 'exec', { sandbox, shell: 'echo hi; echo err >&2; exit 3', ...u });
  assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.truncated], [3, 'hi\n', 'err\n', false]);
  r = await call(client, 'exec', { sandbox, command: ['cat'], stdin: 'from stdin\n', ...u });
  assert.equal(r.stdout, 'from stdin\n');
  r = await call(client, 'exec', { sandbox, command: ['sleep', '30'], timeoutMs: 500, ...u });
  assert.equal(r.timedOut, true);
  assert.equal(r.signal, 9);

  await call(client, 'write_file', { sandbox, path: `${dir}/a.txt`, content: 'héllo\n' });
  r = await call(client, 'read_file', { sandbox, path: `${dir}/a.txt` });
  assert.deepEqual([r.encoding, r.content, r.size], ['text', 'héllo\n', 7]);
  const bytes = Buffer.from([...Array(256).keys()]);
  r = await call(client, 'write_file', { sandbox, path: `${dir}/b.bin`, content: bytes.toString('base64'), encoding: 'base64', mode: '0600' });
  assert.equal(r.bytes, 256);
  r = await call(client, 'read_file', { sandbox, path: `${dir}/b.bin` });
  assert.equal(r.encoding, 'base64');
  assert.ok(Buffer.from(r.content, 'base64').equals(bytes), 'binary bytes back');
  r = await call(client, 'list_files', { sandbox, path: dir });
  const b = r.entries.find((e) => e.name === 'b.bin');
  assert.ok(b && b.size === 256 && (b.mode & 0o777) === 0o600, JSON.stringify(r.entries));
  assert.equal((await callError(client, 'read_file', { sandbox, path: `${dir}/missing` })).code, 'not_found');
  assert.equal((await callError(client, 'read_file', { sandbox, path: dir })).code, 'invalid_argument');
  assert.equal((await callError(client, 'exec', { sandbox: 'sbx_nope', shell: 'true' })).code, 'not_found');
  assert.equal((await callError(client, 'exec', { sandbox, shell: 'true', colour: 1 })).code, 'invalid_argument');
}

// A long job read from offsets: every byte once, then its exit; a command
// fed through write_stdin; a signal.
export async function checkLongJob(client, { sandbox, user }) {
  const u = user ? { user } : {};
  const { process } = await call(client, 'exec_start', {
    sandbox, shell: 'for i in $(seq 1 30); do echo line$i; sleep 0.05; done', ...u });
  let offset = 0, text = '', last;
  for (let i = 0; i < 400; i++) {
    last = await call(client, 'exec_output', { sandbox, process, offset, maxBytes: 20 });
    assert.equal(last.offset, offset);
    text += last.output;
    offset = last.nextOffset;
    if (!last.running && !last.more) break;
    if (!last.more) await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(text, Array.from({ length: 30 }, (_, i) => `line${i + 1}\n`).join(''));
  assert.equal(last.exitCode, 0);
  const st = await call(client, 'exec_status', { sandbox, process });
  assert.deepEqual([st.running, st.exitCode], [false, 0]);
  assert.ok(st.tail.endsWith('line30\n'));
  // A command reading its input: write_stdin, then eof ends it.
  const cat = await call(client, 'exec_start', { sandbox, command: ['cat'], openStdin: true, ...u });
  assert.deepEqual(await call(client, 'write_stdin', { sandbox, process: cat.process, text: 'hello\n' }),
    { written: 6, open: true, complete: true });
  assert.deepEqual(await call(client, 'write_stdin', { sandbox, process: cat.process, text: 'bye\n', eof: true }),
    { written: 4, open: false, complete: true });
  let echoed;
  for (let i = 0; i < 100; i++) {
    echoed = await call(client, 'exec_output', { sandbox, process: cat.process });
    if (!echoed.running) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.deepEqual([echoed.output, echoed.exitCode], ['hello\nbye\n', 0]);
  const sleeper = await call(client, 'exec_start', { sandbox, command: ['sleep', '60'], ...u });
  assert.equal((await call(client, 'exec_signal', { sandbox, process: sleeper.process, signal: 'TERM' })).delivered, true);
  for (let i = 0; i < 100; i++) {
    const s = await call(client, 'exec_status', { sandbox, process: sleeper.process });
    if (!s.running) { assert.equal(s.signal, 15); return; }
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.fail('the signalled sleep did not end');
}

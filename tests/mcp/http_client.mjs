// sbxd's /mcp (Streamable HTTP) driven by the official MCP SDK clients and
// by raw requests for the transport's rules (docs/mcp.md, "/mcp").
// Usage: node http_client.mjs URL SANDBOX OTHER_SANDBOX DIR USER   (keys in
// MCP_KEY_HOST, MCP_KEY_SCOPED, MCP_KEY_READ: host-wide, scoped to SANDBOX, read-only)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client as Client2, StreamableHTTPClientTransport as Http2 } from '@modelcontextprotocol/client';
import assert from 'node:assert/strict';
import http from 'node:http';
import { call, callError, checkTools, checkExecAndFiles, checkLongJob } from './checks.mjs';

const [url, sandbox, other, dir, user] = process.argv.slice(2);
const keys = { host: process.env.MCP_KEY_HOST, scoped: process.env.MCP_KEY_SCOPED, read: process.env.MCP_KEY_READ };
const auth = (key) => ({ requestInit: { headers: { Authorization: `Bearer ${key}` } } });
const u = user ? { user } : {};

async function v1(key) {
  const c = new Client({ name: 'sandboxer-http-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), auth(key));
  await c.connect(transport);
  return { c, transport };
}

// One raw POST (or other method): {status, headers, body (parsed when JSON)}.
function raw(method, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const text = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
    const req = http.request({ host: target.hostname, port: target.port, path: target.pathname, method,
      headers: { Accept: 'application/json, text/event-stream', 'Content-Type': 'application/json',
        Authorization: `Bearer ${keys.host}`, 'Content-Length': Buffer.byteLength(text), ...headers } }, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        let parsed = data;
        try { parsed = JSON.parse(data); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(text);
  });
}

const meta = (version = '2026-07-28') => ({ _meta: {
  'io.modelcontextprotocol/protocolVersion': version, 'io.modelcontextprotocol/clientCapabilities': {} } });
const modernHeaders = (method, name) => ({ 'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': method,
  ...(name ? { 'Mcp-Name': name } : {}) });

// 1. The v1 client (2025-11-25, a session) through every exec, file and process tool.
{
  const { c, transport } = await v1(keys.host);
  assert.ok(transport.sessionId?.startsWith('mcp_'), 'a session id');
  console.log(`v1: ${await checkTools(c)} tools, session ${transport.sessionId}`);
  await checkExecAndFiles(c, { sandbox, dir, user });
  await checkLongJob(c, { sandbox, user });
  console.log('v1: exec, files and a long job ok');
  const sessionId = transport.sessionId;
  await transport.terminateSession();
  const after = await raw('POST', { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    { 'MCP-Session-Id': sessionId, 'MCP-Protocol-Version': '2025-11-25' });
  assert.equal(after.status, 404, 'a deleted session is 404');
  await c.close();
}

// 2. The v2 client pinned to 2026-07-28: stateless, no session.
{
  const c = new Client2({ name: 'sandboxer-http-test', version: '2.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await c.connect(new Http2(new URL(url), auth(keys.host)));
  assert.equal(c.getProtocolEra(), 'modern');
  console.log(`v2 (2026-07-28): ${await checkTools(c)} tools`);
  assert.equal((await call(c, 'exec', { sandbox, command: ['echo', 'modern'], ...u })).stdout, 'modern\n');
  await c.close();
}

// 3. Keys: a sandbox's own key reaches only its sandbox; a read-only key only reads.
{
  const { c } = await v1(keys.scoped);
  assert.equal((await call(c, 'exec', { sandbox, shell: 'echo mine', ...u })).stdout, 'mine\n');
  assert.equal((await callError(c, 'sandbox_list', {})).code, 'forbidden');
  assert.equal((await callError(c, 'sandbox_get', { sandbox: other })).code, 'forbidden');
  await c.close();
  const r = await v1(keys.read);
  assert.equal((await call(r.c, 'sandbox_get', { sandbox })).sandbox.id, sandbox);
  assert.equal((await callError(r.c, 'exec', { sandbox, shell: 'true' })).code, 'forbidden');
  await r.c.close();
  const none = await raw('POST', { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }, { Authorization: '' });
  assert.equal(none.status, 401, 'no key');
  console.log('keys ok');
}

// 4. The transport's rules, raw.
const init = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
let r = await raw('POST', init);
assert.equal(r.status, 200);
const sid = r.headers['mcp-session-id'];
assert.match(sid, /^mcp_[0-9a-f]{32}$/);
assert.equal(r.body.result.protocolVersion, '2025-11-25');
r = await raw('POST', { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'MCP-Session-Id': sid });
assert.equal(r.status, 202);
r = await raw('POST', { jsonrpc: '2.0', id: 2, method: 'ping' }, { 'MCP-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' });
assert.deepEqual([r.status, r.body.result], [200, {}]);
assert.equal((await raw('POST', { jsonrpc: '2.0', id: 2, method: 'ping' })).status, 400, 'no session');
assert.equal((await raw('POST', { jsonrpc: '2.0', id: 2, method: 'ping' }, { 'MCP-Session-Id': 'mcp_nope' })).status, 404);
assert.equal((await raw('POST', { jsonrpc: '2.0', id: 2, method: 'ping' },
  { 'MCP-Session-Id': sid, 'MCP-Protocol-Version': '1999-01-01' })).status, 400, 'an unknown protocol version');
r = await raw('POST', { jsonrpc: '2.0', id: 2, method: 'ping' }, { 'MCP-Session-Id': sid, Authorization: `Bearer ${keys.scoped}` });
assert.equal(r.status, 404, "another key's session");
assert.equal((await raw('GET', undefined)).status, 405);
assert.equal((await raw('POST', init, { Origin: 'http://evil.example.com' })).status, 403);
assert.equal((await raw('POST', init, { Origin: 'http://localhost:5173' })).status, 200);
assert.equal((await raw('POST', init, { Host: 'evil.example.com' })).status, 403);
assert.equal((await raw('POST', init, { Accept: 'application/json' })).status, 406);
// initialize sent as a notification (no id): nothing to answer, no session.
r = await raw('POST', { jsonrpc: '2.0', method: 'initialize', params: {} });
assert.equal(r.status, 400, 'an initialize without an id has no session to belong to');
r = await raw('POST', '{not json');
assert.deepEqual([r.status, r.body.error.code], [400, -32700]);
assert.equal((await raw('POST', [init])).status, 400, 'a batch');
assert.equal((await raw('DELETE', undefined, { 'MCP-Session-Id': sid })).status, 204);
assert.equal((await raw('DELETE', undefined, { 'MCP-Session-Id': sid })).status, 404);
// 2026-07-28: headers against the body.
const list = { jsonrpc: '2.0', id: 3, method: 'tools/list', params: meta() };
r = await raw('POST', list, modernHeaders('tools/list'));
assert.deepEqual([r.status, r.body.result.resultType], [200, 'complete']);
r = await raw('POST', list, { 'Mcp-Method': 'tools/list' });
assert.deepEqual([r.status, r.body.error.code, r.body.id], [400, -32020, 3], 'no MCP-Protocol-Version');
r = await raw('POST', list, modernHeaders('tools/call'));
assert.deepEqual([r.status, r.body.error.code], [400, -32020], 'Mcp-Method differs');
const callExec = { jsonrpc: '2.0', id: 4, method: 'tools/call',
  params: { ...meta(), name: 'exec', arguments: { sandbox, command: ['echo', 'raw'], ...u } } };
r = await raw('POST', callExec, modernHeaders('tools/call', 'read_file'));
assert.deepEqual([r.status, r.body.error.code], [400, -32020], 'Mcp-Name differs');
r = await raw('POST', callExec, modernHeaders('tools/call', `=?base64?${Buffer.from('exec').toString('base64')}?=`));
assert.deepEqual([r.status, r.body.result.structuredContent.stdout], [200, 'raw\n']);
r = await raw('POST', { ...list, params: meta('2099-01-01') }, { ...modernHeaders('tools/list'), 'MCP-Protocol-Version': '2099-01-01' });
assert.deepEqual([r.status, r.body.error.code], [400, -32022]);
assert.deepEqual(r.body.error.data.supported, ['2026-07-28']);
r = await raw('POST', { jsonrpc: '2.0', id: 5, method: 'initialize', params: meta() }, modernHeaders('initialize'));
assert.deepEqual([r.status, r.body.error.code], [404, -32601]);
r = await raw('POST', { jsonrpc: '2.0', id: 6, method: 'server/discover', params: meta() }, modernHeaders('server/discover'));
assert.deepEqual([r.status, r.body.result.supportedVersions[0]], [200, '2026-07-28']);
assert.equal(r.headers['mcp-session-id'], undefined, 'no session in 2026-07-28');
console.log('transport rules ok');
console.log('ok');

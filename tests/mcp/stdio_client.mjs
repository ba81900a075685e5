// `sbx mcp` driven by the official MCP SDK clients over stdio: v1
// (@modelcontextprotocol/sdk, 2025-11-25 with initialize) runs every check;
// v2 (@modelcontextprotocol/client) pinned to 2026-07-28 (stateless,
// server/discover) lists the tools and runs a command. sbx mcp's own
// forward tool carries a local port to a server the "guest" runs.
// Usage: node stdio_client.mjs SBX SANDBOX DIR [USER]   (SBX_HOST in the environment)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client as Client2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as Stdio2 } from '@modelcontextprotocol/client/stdio';
import assert from 'node:assert/strict';
import http from 'node:http';
import { call, callError, checkTools, checkExecAndFiles, checkLongJob } from './checks.mjs';

const [sbx, sandbox, dir, user] = process.argv.slice(2);
const params = { command: sbx, args: ['mcp', '--label', 'via=mcp-test'], env: { ...process.env }, stderr: 'inherit' };

const v1 = new Client({ name: 'sandboxer-stdio-test', version: '1.0.0' });
await v1.connect(new StdioClientTransport(params));
assert.equal(v1.getServerVersion().name, 'sandboxer');
console.log(`v1: ${await checkTools(v1)} tools`);
await checkExecAndFiles(v1, { sandbox, dir, user });
console.log('v1: exec and files ok');
await checkLongJob(v1, { sandbox, user });
console.log('v1: long job ok');
// Calls at once: a slow exec does not hold up a quick one.
const slow = call(v1, 'exec', { sandbox, shell: 'sleep 2; echo slow', ...(user ? { user } : {}) });
const t0 = Date.now();
await v1.ping();
await call(v1, 'exec', { sandbox, shell: 'echo quick', ...(user ? { user } : {}) });
const quickMs = Date.now() - t0;
assert.equal((await slow).stdout, 'slow\n');
assert.ok(quickMs < 1900, `a quick call waited for a slow one (${quickMs} ms)`);
// forward (sbx mcp's own): a local port carried to the sandbox's. The
// fixture's "guest" is this host, so the sandbox's port is a server here.
const server = http.createServer((req, res) => res.end(`served ${req.url}`));
await new Promise((res) => server.listen(0, '127.0.0.1', res));
const fw = await call(v1, 'forward', { sandbox, port: server.address().port });
assert.match(fw.local, /^127\.0\.0\.1:\d+$/);
assert.equal(await (await fetch(`${fw.url}through`)).text(), 'served /through');
assert.deepEqual(await call(v1, 'unforward', { localPort: fw.localPort }), { localPort: fw.localPort });
await assert.rejects(fetch(fw.url), 'the local port is closed after unforward');
assert.equal((await callError(v1, 'forward', { sandbox: 'sbx_nope', port: 80 })).code, 'not_found');
server.close();
console.log('v1: forward and unforward ok');
await v1.close();

const v2 = new Client2({ name: 'sandboxer-stdio-test', version: '2.0.0' },
  { versionNegotiation: { mode: { pin: '2026-07-28' } } });
await v2.connect(new Stdio2(params));
assert.equal(v2.getProtocolEra(), 'modern');
console.log(`v2 (2026-07-28): ${await checkTools(v2)} tools`);
const r = await call(v2, 'exec', { sandbox, command: ['echo', 'modern'], ...(user ? { user } : {}) });
assert.equal(r.stdout, 'modern\n');
await v2.close();
console.log('ok');

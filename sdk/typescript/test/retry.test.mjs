// The retry policy and the transport's headers, against a local stub server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import * as path from 'node:path';
import * as fs from 'node:fs';
import {
  Sandboxer, Sandbox, parseHost, RateLimitedError, CapacityExceededError, InvalidArgumentError, NotImplementedError,
  SandboxerError, ConnectionError, AgentUnavailableError, errorFromResponse, ProtocolError,
} from '../dist/index.js';
import { stubServer, json, apiError, SANDBOX, tmpdir } from './helpers.mjs';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

function client(port, extra = {}) {
  const attempts = [];
  const c = new Sandboxer({ host: `http://127.0.0.1:${port}`, apiKey: 'sbxk_test', retryBaseMs: 20, ...extra });
  c.transport.onAttempt = (a) => attempts.push(a);
  return { c, attempts };
}

test('create: 429 + Retry-After: 1, then 201: one retry after the wait, the same Idempotency-Key', async () => {
  const stub = await stubServer((req, res, body, n) => {
    if (n === 1) return apiError(res, 429, 'rate_limited', { retryAfterSeconds: 1 }, { 'Retry-After': '1' });
    json(res, 201, { ok: true, requestId: 'req_1', sandbox: { ...SANDBOX, labels: { a: 'b' } }, replayed: false, warnings: ['w'] });
  });
  try {
    const { c, attempts } = client(stub.port);
    const t0 = Date.now();
    const sb = await c.create({ cpus: 1, memoryMib: 1024, labels: { a: 'b' }, ttl: 90 });
    const elapsed = Date.now() - t0;
    assert.equal(stub.requests.length, 2);
    assert.equal(attempts.length, 2);
    assert.equal(attempts[0].status, 429);
    assert.equal(attempts[0].waitMs, 1000);
    assert.ok(elapsed >= 950, `waited ${elapsed} ms`);
    const [k1, k2] = stub.requests.map((r) => r.headers['idempotency-key']);
    assert.match(k1, UUID);
    assert.equal(k1, k2);
    assert.equal(stub.requests[0].body, stub.requests[1].body);
    assert.deepEqual(JSON.parse(stub.requests[0].body), { cpus: 1, memoryMib: 1024, labels: { a: 'b' }, ttl: '90s' });
    assert.equal(stub.requests[0].headers.authorization, 'Bearer sbxk_test');
    assert.ok(sb instanceof Sandbox);
    assert.equal(sb.id, SANDBOX.id);
    assert.deepEqual(sb.labels, { a: 'b' });
    assert.deepEqual(sb.createResult.warnings, ['w']);
  } finally {
    await stub.close();
  }
});

test('create: a given idempotencyKey is sent as is; two creates get two keys', async () => {
  const stub = await stubServer((req, res) => json(res, 201, { ok: true, sandbox: SANDBOX, replayed: false, warnings: [] }));
  try {
    const { c } = client(stub.port);
    await c.create({ idempotencyKey: 'my-key-1' });
    await c.create();
    await c.create();
    assert.equal(stub.requests[0].headers['idempotency-key'], 'my-key-1');
    assert.notEqual(stub.requests[1].headers['idempotency-key'], stub.requests[2].headers['idempotency-key']);
    assert.equal(JSON.parse(stub.requests[0].body).idempotencyKey, undefined);
  } finally {
    await stub.close();
  }
});

test('GET: 503 then 200: retried with backoff', async () => {
  const stub = await stubServer((req, res, body, n) => {
    if (n === 1) return apiError(res, 503, 'capacity_exceeded');
    json(res, 200, { ok: true, sandbox: SANDBOX });
  });
  try {
    const { c, attempts } = client(stub.port);
    const sb = await c.get(SANDBOX.id);
    assert.equal(sb.state, 'running');
    assert.equal(stub.requests.length, 2);
    assert.deepEqual(attempts.map((a) => a.status), [503, 200]);
    assert.ok(attempts[0].waitMs >= 10 && attempts[0].waitMs <= 20, `backoff ${attempts[0].waitMs}`);
  } finally {
    await stub.close();
  }
});

test('backoff doubles, capped; gives up after maxRetries with the typed error', async () => {
  const stub = await stubServer((req, res) => apiError(res, 502, 'agent_unavailable'));
  try {
    const { c, attempts } = client(stub.port, { maxRetries: 3, retryBaseMs: 10, retryMaxMs: 25 });
    await assert.rejects(c.get('sbx_x'), (e) => e instanceof AgentUnavailableError && e.status === 502);
    assert.equal(stub.requests.length, 4);
    const waits = attempts.slice(0, 3).map((a) => a.waitMs);
    assert.ok(waits[0] >= 5 && waits[0] <= 10 && waits[1] >= 10 && waits[1] <= 20 && waits[2] >= 12 && waits[2] <= 25, String(waits));
    assert.equal(attempts[3].waitMs, undefined);
  } finally {
    await stub.close();
  }
});

test('400 is never retried', async () => {
  const stub = await stubServer((req, res) => apiError(res, 400, 'invalid_argument'));
  try {
    const { c } = client(stub.port);
    await assert.rejects(c.get('sbx_x'), (e) => {
      assert.ok(e instanceof InvalidArgumentError && e instanceof SandboxerError);
      assert.deepEqual([e.status, e.code, e.requestId, e.message], [400, 'invalid_argument', 'req_00000000000000aa', 'stub invalid_argument']);
      return true;
    });
    assert.equal(stub.requests.length, 1);
  } finally {
    await stub.close();
  }
});

test('501 and a POST without an Idempotency-Key are not retried', async () => {
  const stub = await stubServer((req, res) => (req.url.endsWith('/exec') ? apiError(res, 503, 'capacity_exceeded') : apiError(res, 501, 'not_implemented')));
  try {
    const { c } = client(stub.port);
    await assert.rejects(c.sandbox('sbx_x').exec('true'), CapacityExceededError);
    assert.equal(stub.requests.length, 1);
    await assert.rejects(c.sandbox('sbx_x').stop(), NotImplementedError);
    assert.equal(stub.requests.length, 2);
    assert.equal(stub.requests[1].headers['idempotency-key'], undefined);
  } finally {
    await stub.close();
  }
});

test('rate_limited out of retries: RateLimitedError.retryAfter; a Retry-After over the cap is thrown at once', async () => {
  const stub = await stubServer((req, res) => apiError(res, 429, 'rate_limited', { retryAfterSeconds: 7 }, { 'Retry-After': '7' }));
  try {
    let { c } = client(stub.port, { maxRetries: 0 });
    await assert.rejects(c.create(), (e) => e instanceof RateLimitedError && e.retryAfter === 7 && e.status === 429);
    ({ c } = client(stub.port, { maxRetryAfterSeconds: 5 }));
    const t0 = Date.now();
    await assert.rejects(c.create(), RateLimitedError);
    assert.ok(Date.now() - t0 < 1000);
    assert.equal(stub.requests.length, 2);
  } finally {
    await stub.close();
  }
});

test('fork: an automatic Idempotency-Key, the same on its retry', async () => {
  const stub = await stubServer((req, res, body, n) => {
    if (n === 1) return apiError(res, 503, 'capacity_exceeded');
    json(res, 201, { ok: true, sandboxes: [SANDBOX, { ...SANDBOX, id: 'sbx_1111111111111111' }], replayed: false });
  });
  try {
    const { c } = client(stub.port);
    const kids = await c.sandbox('sbx_parent').fork({ count: 2, memory: true });
    assert.deepEqual(kids.map((k) => k.id), [SANDBOX.id, 'sbx_1111111111111111']);
    assert.equal(stub.requests.length, 2);
    assert.match(stub.requests[0].headers['idempotency-key'], UUID);
    assert.equal(stub.requests[0].headers['idempotency-key'], stub.requests[1].headers['idempotency-key']);
    assert.deepEqual(JSON.parse(stub.requests[0].body), { count: 2, memory: true });
  } finally {
    await stub.close();
  }
});

test('a connection reset before the answer: retried for a GET, not for exec', async () => {
  const stub = await stubServer((req, res, body, n) => {
    if (n === 1 || req.url.endsWith('/exec')) return req.socket.destroy();
    json(res, 200, { ok: true, sandbox: SANDBOX });
  });
  try {
    const { c } = client(stub.port);
    assert.equal((await c.get(SANDBOX.id)).id, SANDBOX.id);
    assert.equal(stub.requests.length, 2);
    await assert.rejects(c.sandbox('sbx_x').exec('true'), ConnectionError);
    assert.equal(stub.requests.length, 3);
  } finally {
    await stub.close();
  }
});

test('an exec stream cut short is a ProtocolError; an in-stream error is typed', async () => {
  const stub = await stubServer((req, res, body, n) => {
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    res.write('{"type":"start","process":null,"pid":5}\n{"type":"stdout","data":"aGkK"}\n');
    if (n === 1) return res.end();
    res.end('{"type":"error","code":"agent_unavailable","message":"gone"}\n');
  });
  try {
    const { c } = client(stub.port);
    await assert.rejects(c.sandbox('sbx_x').exec('x'), ProtocolError);
    await assert.rejects(c.sandbox('sbx_x').exec('x'), (e) => e instanceof AgentUnavailableError && e.message === 'gone');
  } finally {
    await stub.close();
  }
});

test('Unix socket: no Authorization header; host parsing', async () => {
  const dir = tmpdir();
  const sock = path.join(dir, 's.sock');
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(req.headers);
    json(res, 200, { ok: true, host: 'stub' });
  });
  await new Promise((r) => server.listen(sock, r));
  try {
    const c = new Sandboxer({ host: `unix:${sock}`, apiKey: 'sbxk_secret' });
    assert.equal((await c.health()).host, 'stub');
    assert.equal(seen[0].authorization, undefined);
    assert.equal(c.host, `unix:${sock}`);
    await assert.rejects(new Sandboxer({ host: `unix:${dir}/missing.sock`, maxRetries: 0 }).health(), ConnectionError);
  } finally {
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(parseHost('http://[::1]:7070'), { kind: 'http', hostname: '::1', port: 7070, basePath: '', display: 'http://[::1]:7070' });
  assert.equal(parseHost('tcp:127.0.0.1:9').port, 9);
  assert.equal(parseHost('/run/x.sock').socketPath, '/run/x.sock');
  assert.throws(() => parseHost('ftp://x'), SandboxerError);
  const saved = [process.env.SBX_HOST, process.env.SBX_API_KEY];
  process.env.SBX_HOST = 'http://127.0.0.1:1';
  process.env.SBX_API_KEY = 'sbxk_env';
  try {
    const c = new Sandboxer();
    assert.equal(c.host, 'http://127.0.0.1:1');
    assert.equal(c.transport.apiKey, 'sbxk_env');
  } finally {
    if (saved[0] === undefined) delete process.env.SBX_HOST; else process.env.SBX_HOST = saved[0];
    if (saved[1] === undefined) delete process.env.SBX_API_KEY; else process.env.SBX_API_KEY = saved[1];
  }
});

test('errorFromResponse: every documented code has its class; unknown codes fall back by status', () => {
  const codes = ['bad_request', 'invalid_argument', 'unauthorized', 'forbidden', 'not_found', 'method_not_allowed', 'invalid_state',
    'idempotency_conflict', 'already_exists', 'payload_too_large', 'headers_too_large', 'rate_limited', 'limit_reached', 'internal',
    'not_implemented', 'no_ready_machine', 'agent_unavailable', 'capacity_exceeded', 'insufficient_storage'];
  const names = new Set();
  for (const code of codes) {
    const e = errorFromResponse(400, { code, message: 'm' });
    assert.ok(e instanceof SandboxerError, code);
    assert.equal(e.code, code);
    names.add(e.constructor.name);
  }
  assert.equal(names.size, codes.length);
  const e = errorFromResponse(418, { code: 'teapot', message: 'x' }, { 'x-request-id': 'req_9' });
  assert.equal(e.code, 'teapot');
  assert.equal(e.requestId, 'req_9');
  assert.equal(errorFromResponse(429, {}, { 'retry-after': '3' }).code, 'http_429');
});

test('Sandbox.with deletes afterwards, also when fn throws; await using too', async () => {
  const stub = await stubServer((req, res) => {
    if (req.method === 'POST') return json(res, 201, { ok: true, sandbox: SANDBOX, replayed: false, warnings: [] });
    if (req.method === 'DELETE') return json(res, 200, { ok: true, deleted: [SANDBOX.id] });
    apiError(res, 404, 'not_found');
  });
  try {
    const { c } = client(stub.port);
    assert.equal(await Sandbox.with({ client: c }, (sb) => sb.id), SANDBOX.id);
    await assert.rejects(c.with({}, async () => { throw new Error('boom'); }), /boom/);
    const deletes = stub.requests.filter((r) => r.method === 'DELETE');
    assert.equal(deletes.length, 2);
    assert.equal(deletes[0].url, `/v1/sandboxes/${SANDBOX.id}`);
    const sb = await c.create();
    assert.equal(typeof sb[Symbol.asyncDispose], 'function');
    await sb[Symbol.asyncDispose]();
    assert.equal(stub.requests.filter((r) => r.method === 'DELETE').length, 3);
  } finally {
    await stub.close();
  }
});

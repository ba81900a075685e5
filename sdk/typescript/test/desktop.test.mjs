// The desktop's methods against a local stub server: the requests they
// make (the computer-use bodies of docs/api.md), what they return.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Sandboxer, Desktop, InvalidStateError, AgentUnavailableError, ProtocolError,
} from '../dist/index.js';
import { stubServer, json, apiError, SANDBOX } from './helpers.mjs';

const PNG = Buffer.concat([Buffer.from('\x89PNG\r\n\x1a\n', 'latin1'), Buffer.from([...Array(256).keys()])]);
const BASE = `/v1/sandboxes/${SANDBOX.id}/desktop`;
const DESKTOP = {
  running: true, sessionRunning: true, display: 1, width: 1280, height: 800, vncPort: 5901,
  url: 'https://d-desktop.sbx.localhost:8443/vnc.html?_token=t', viewOnlyUrl: null,
};

// A stub answering `answer(req, n)` ({status, body} or a function of res), and the sandbox's desktop.
async function withDesktop(answer, fn) {
  const stub = await stubServer((req, res, body, n) => {
    const a = answer(req, n);
    if (typeof a === 'function') return a(res);
    return json(res, 200, { ok: true, requestId: 'req_1', ...a });
  });
  try {
    const c = new Sandboxer({ host: `http://127.0.0.1:${stub.port}`, apiKey: 'sbxk_test', retryBaseMs: 10 });
    await fn(c.sandbox(SANDBOX.id).desktop, stub.requests);
  } finally {
    await stub.close();
  }
}

const bodies = (requests) => requests.map((r) => JSON.parse(r.body));

test('start and status: the desktop and its links', async () => {
  await withDesktop((req, n) => (n === 1 ? { warnings: ['w'], desktop: { ...DESKTOP, started: true } }
    : { desktop: { ...DESKTOP, running: false, display: null, width: null, height: null, vncPort: null } }), async (d, requests) => {
    assert.ok(d instanceof Desktop);
    const info = await d.start({ width: 1280, height: 800 });
    assert.deepEqual([info.running, info.started, info.display, info.vncPort, info.url, info.warnings],
      [true, true, 1, 5901, DESKTOP.url, ['w']]);
    assert.deepEqual([requests[0].method, requests[0].url], ['POST', BASE]);
    assert.deepEqual(JSON.parse(requests[0].body), { width: 1280, height: 800 });
    const off = await d.status();
    assert.deepEqual([off.running, off.display], [false, null]);
    assert.deepEqual([requests[1].method, requests[1].url], ['GET', BASE]);
  });
});

test('start is retried: it starts one desktop however often it is asked', async () => {
  await withDesktop((req, n) => (n === 1 ? (res) => apiError(res, 503, 'capacity_exceeded') : { desktop: DESKTOP }), async (d, requests) => {
    assert.equal((await d.start()).running, true);
    assert.deepEqual(bodies(requests), [{}, {}]);
  });
});

test('screenshot (GET, the bytes) and zoom (an action, base64 decoded)', async () => {
  await withDesktop((req) => (req.method === 'GET'
    ? (res) => { res.writeHead(200, { 'Content-Type': 'image/png', 'X-Image-Width': '640' }); res.end(PNG); }
    : { action: 'zoom', result: { png: PNG.toString('base64'), width: 10, height: 20 } }), async (d, requests) => {
    assert.ok((await d.screenshot({ maxWidth: 640 })).equals(PNG));
    assert.equal(requests[0].url, `${BASE}/screenshot?maxWidth=640`);
    assert.ok((await d.zoom([0, 0, 10, 20])).equals(PNG));
    assert.equal(requests[1].url, `${BASE}/actions`);
    assert.deepEqual(JSON.parse(requests[1].body), { action: 'zoom', region: [0, 0, 10, 20] });
  });
});

test('the shorthands post the computer-use actions', async () => {
  await withDesktop(() => ({ action: 'x', result: {} }), async (d, requests) => {
    await d.click(10, 20);
    await d.click(undefined, undefined, { button: 'right' });
    await d.click(1, 2, { count: 2, hold: 'shift' });
    await d.click(1, 2, { count: 3 });
    await d.click(1, 2, { button: 'middle' });
    await d.move(5, 6);
    await d.drag([1, 2], [30, 40]);
    await d.mouseDown(7, 8);
    await d.mouseUp();
    await d.scroll(100, 200, 'down', 5, { hold: 'ctrl' });
    await d.scroll(undefined, undefined, 'left');
    await d.type('hello\nworld');
    await d.key('ctrl+s');
    await d.holdKey('shift', 0.5);
    await d.wait(1.5);
    assert.deepEqual(await d.action({ action: 'screenshot', max_width: 800 }), {});
    assert.deepEqual(bodies(requests), [
      { action: 'left_click', coordinate: [10, 20] },
      { action: 'right_click' },
      { action: 'double_click', coordinate: [1, 2], text: 'shift' },
      { action: 'triple_click', coordinate: [1, 2] },
      { action: 'middle_click', coordinate: [1, 2] },
      { action: 'mouse_move', coordinate: [5, 6] },
      { action: 'left_click_drag', start_coordinate: [1, 2], coordinate: [30, 40] },
      { action: 'left_mouse_down', coordinate: [7, 8] },
      { action: 'left_mouse_up' },
      { action: 'scroll', coordinate: [100, 200], scroll_direction: 'down', scroll_amount: 5, text: 'ctrl' },
      { action: 'scroll', scroll_direction: 'left', scroll_amount: 3 },
      { action: 'type', text: 'hello\nworld' },
      { action: 'key', text: 'ctrl+s' },
      { action: 'hold_key', text: 'shift', duration: 0.5 },
      { action: 'wait', duration: 1.5 },
      { action: 'screenshot', max_width: 800 },
    ]);
    assert.ok(requests.every((r) => r.method === 'POST' && r.url === `${BASE}/actions`));
  });
});

test('cursorPosition; bad arguments make no request', async () => {
  await withDesktop(() => ({ action: 'cursor_position', result: { x: 12, y: 34 } }), async (d, requests) => {
    await assert.rejects(d.click(1), TypeError);
    await assert.rejects(d.click(1, 2, { button: 'right', count: 2 }), TypeError);
    await assert.rejects(d.click(1, 2, { button: 'fourth' }), TypeError);
    assert.equal(requests.length, 0);
    assert.deepEqual(await d.cursorPosition(), { x: 12, y: 34 });
    assert.deepEqual(bodies(requests), [{ action: 'cursor_position' }]);
  });
});

test('errors are typed; an action is never re-sent', async () => {
  await withDesktop(() => (res) => apiError(res, 409, 'invalid_state'), async (d) => {
    await assert.rejects(d.screenshot(), InvalidStateError);
    await assert.rejects(d.key('Return'), InvalidStateError);
  });
  await withDesktop(() => (res) => apiError(res, 502, 'agent_unavailable'), async (d, requests) => {
    await assert.rejects(d.click(1, 2), AgentUnavailableError);
    assert.equal(requests.length, 1); // a click may have happened
  });
  await withDesktop(() => ({ action: 'zoom', result: { png: '!!', width: 1, height: 1 } }), async (d) => {
    await assert.rejects(d.zoom([0, 0, 1, 1]), ProtocolError);
  });
});

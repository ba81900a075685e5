// A real headless Chromium, driven line by line, for the sbxd guest test's
// "browser" part (tests/guest/sbxd/browser.sh). The shell side makes the
// sandboxes and judges; this side only does what a browser does and reports
// what it saw, one JSON line per command on stdout (its own log on stderr).
//
// Usage: node probe.mjs CHROMIUM   (HOME holds the NSS database that trusts
// sbxd's CA: browser.sh makes it). First line out: {"ready":true,...} once
// Chromium runs. Commands on stdin, one per line, words split on spaces:
//   goto CTX URL          navigate CTX's page (the context and its page are
//                         made on first use) to URL: {status, url, text, chain}
//   cookies CTX           the context's cookies (Playwright's cookies API)
//   doccookie CTX [N=V]   document.cookie as the page's script sees it
//                         (having set cookie N=V itself first)
//   ws CTX PATH MSG...    from the page's script: a WebSocket to
//                         wss://<page's host>PATH, send each MSG, await its
//                         echo: {messages, closeCode}
//   sse CTX PATH          from the page's script: an EventSource on PATH
//                         until the server ends the stream: {events}
//   vnc CTX URL           navigate CTX to a desktop link (sbxd's noVNC page)
//                         and wait until noVNC says it is connected (the
//                         noVNC_connected class on <html>): {width, height}
//                         of its canvas, the remote screen's size
//   pixel CTX X Y [COLOR] the noVNC canvas's pixel at screen (X,Y) as
//                         #rrggbb; with COLOR, wait (bounded) until it is
//                         within 24 of it per channel: {color, matched}
//   png FILE X Y...       a PNG file's pixels at the points: {colors,
//                         width, height} (decoded by the browser)
//   pngdiff A B X0 Y0 X1 Y1  how many pixels of the rectangle differ
//                         between two PNG files of one size: {differ}
//   close CTX | quit
// Every reply has "ok" (false with "error" when the command threw).
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const [executablePath] = process.argv.slice(2);
// Level 1 emulates its CPU (TCG, 10-50x slower than hardware): Chromium's
// start and a wake-on-request take long. Generous, but every wait is bounded.
const LAUNCH_MS = 900_000;
const STEP_MS = 600_000;

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const log = (...a) => console.error(new Date().toISOString(), ...a);

const t0 = Date.now();
const browser = await chromium.launch({
  executablePath,
  headless: true,
  timeout: LAUNCH_MS,
  // Chromium's sandbox puts renderers into namespaces of an unprivileged
  // user and refuses to start as root (crbug.com/638180); level 1 runs
  // everything as root in a throwaway VM, so the sandbox is off there.
  chromiumSandbox: false,
  // No GPU in level 1: spare the software GPU process's start under TCG.
  args: ['--disable-gpu'],
});
browser.on('disconnected', () => log('chromium disconnected'));
out({ ready: true, ok: true, version: browser.version(), launchMs: Date.now() - t0 });

const contexts = new Map();
async function pageOf(name) {
  let c = contexts.get(name);
  if (!c) {
    // A context is a fresh profile: its own cookie jar (RFC 6265 §5.3).
    const context = await browser.newContext();
    context.setDefaultTimeout(STEP_MS);
    context.setDefaultNavigationTimeout(STEP_MS);
    const page = await context.newPage();
    page.on('console', (m) => log(`[${name}] console.${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => log(`[${name}] page error: ${e.message}`));
    c = { context, page };
    contexts.set(name, c);
  }
  return c;
}

const commands = {
  async goto(name, url) {
    const { page } = await pageOf(name);
    const response = await page.goto(url, { waitUntil: 'load', timeout: STEP_MS });
    // The redirects that led here, first one first.
    const chain = [];
    for (let r = response.request().redirectedFrom(); r; r = r.redirectedFrom()) {
      const res = await r.response();
      chain.unshift({ url: r.url(), status: res ? res.status() : null });
    }
    return {
      status: response.status(),
      url: page.url(),
      text: await page.evaluate(() => document.body ? document.body.innerText : ''),
      chain,
    };
  },
  async cookies(name) {
    const { context } = await pageOf(name);
    return { cookies: await context.cookies() };
  },
  async doccookie(name, set) {
    const { page } = await pageOf(name);
    // With SET (name=value), the script first sets a cookie of its own: a
    // control that document.cookie works in this page (RFC 6265 §8.5).
    return { cookie: await page.evaluate((set) => { if (set) document.cookie = `${set}; Secure; Path=/`; return document.cookie; }, set) };
  },
  async ws(name, path, ...messages) {
    const { page } = await pageOf(name);
    return page.evaluate(([path, messages, limit]) => new Promise((resolve, reject) => {
      const got = [];
      const timer = setTimeout(() => reject(new Error(`WebSocket: ${got.length} replies in ${limit} ms`)), limit);
      const ws = new WebSocket(`wss://${location.host}${path}`);
      ws.onerror = () => { clearTimeout(timer); reject(new Error('WebSocket error event')); };
      // One message at a time: each echo before the next send.
      ws.onopen = () => ws.send(messages[0]);
      ws.onmessage = (e) => {
        got.push(e.data);
        if (got.length < messages.length) ws.send(messages[got.length]);
        else ws.close(1000);  // RFC 6455 §7.4.1: normal closure
      };
      ws.onclose = (e) => { clearTimeout(timer); resolve({ messages: got, closeCode: e.code, url: ws.url }); };
    }), [path, messages, STEP_MS - 10_000]);
  },
  async sse(name, path) {
    const { page } = await pageOf(name);
    return page.evaluate(([path, limit]) => new Promise((resolve, reject) => {
      const events = [];
      const timer = setTimeout(() => { es.close(); reject(new Error(`EventSource: ${events.length} events in ${limit} ms`)); }, limit);
      const es = new EventSource(path);
      es.onmessage = (e) => events.push({ data: e.data, at: performance.now() });
      // The server closes the stream after its last event; an EventSource
      // would then reconnect (HTML, "Server-sent events", §9.2.3 "reestablish
      // the connection"), so the first error after the events ends it here.
      es.onerror = () => {
        if (events.length === 0 && es.readyState !== EventSource.CLOSED) return;
        clearTimeout(timer);
        es.close();
        resolve({ events, url: es.url });
      };
    }), [path, STEP_MS - 10_000]);
  },
  async vnc(name, url) {
    const { page } = await pageOf(name);
    await page.goto(url, { waitUntil: 'load', timeout: STEP_MS });
    await page.waitForFunction(() => document.documentElement.classList.contains('noVNC_connected'),
      null, { timeout: STEP_MS, polling: 500 });
    return page.evaluate(() => {
      const c = document.querySelector('#noVNC_container canvas') || document.querySelector('canvas');
      return { width: c.width, height: c.height };
    });
  },
  async pixel(name, x, y, color) {
    const { page } = await pageOf(name);
    return page.evaluate(([x, y, color, limit]) => new Promise((resolve) => {
      const c = document.querySelector('#noVNC_container canvas') || document.querySelector('canvas');
      const end = performance.now() + limit;
      const poll = () => {
        const got = hex(c.getContext('2d').getImageData(x, y, 1, 1).data);
        const matched = !color || near(got, color);
        if (matched || performance.now() > end) resolve({ color: got, matched });
        else setTimeout(poll, 250);
      };
      poll();
      function hex(d) { return '#' + [d[0], d[1], d[2]].map((v) => v.toString(16).padStart(2, '0')).join(''); }
      function near(a, b) {
        for (let i = 1; i < 7; i += 2) {
          if (Math.abs(parseInt(a.slice(i, i + 2), 16) - parseInt(b.slice(i, i + 2), 16)) > 24) return false;
        }
        return true;
      }
    }), [Number(x), Number(y), color, STEP_MS - 10_000]);
  },
  async png(file, ...xy) {
    const points = [];
    for (let i = 0; i + 1 < xy.length; i += 2) points.push([Number(xy[i]), Number(xy[i + 1])]);
    return decodePng([file], (images, [points]) => {
      const [{ data, width }] = images;
      const colors = points.map(([x, y]) => '#' + [0, 1, 2].map((k) =>
        data[(y * width + x) * 4 + k].toString(16).padStart(2, '0')).join(''));
      return { colors, width, height: images[0].height };
    }, [points]);
  },
  async pngdiff(a, b, x0, y0, x1, y1) {
    return decodePng([a, b], (images, [r]) => {
      const [p, q] = images;
      if (p.width !== q.width || p.height !== q.height) throw new Error('the two PNGs differ in size');
      let differ = 0;
      for (let y = r[1]; y < r[3]; y++) {
        for (let x = r[0]; x < r[2]; x++) {
          const i = (y * p.width + x) * 4;
          if (p.data[i] !== q.data[i] || p.data[i + 1] !== q.data[i + 1] || p.data[i + 2] !== q.data[i + 2]) differ++;
        }
      }
      return { differ };
    }, [[x0, y0, x1, y1].map(Number)]);
  },
  async close(name) {
    const c = contexts.get(name);
    contexts.delete(name);
    if (c) await c.context.close();
    return {};
  },
};

// decodePng FILES FN ARGS: FN(images, ARGS) run in a blank page of its
// own, each image {width, height, data: RGBA bytes} decoded by the browser
// (createImageBitmap), so the judge reads the pixels a browser would show.
async function decodePng(files, fn, args) {
  const { page } = await pageOf('png-decoder');
  const b64 = files.map((f) => readFileSync(f).toString('base64'));
  return page.evaluate(async ([b64, fnText, args]) => {
    const images = [];
    for (const b of b64) {
      const bytes = Uint8Array.from(atob(b), (ch) => ch.charCodeAt(0));
      const bitmap = await createImageBitmap(new Blob([bytes], { type: 'image/png' }));
      const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
      const ctx = canvas.getContext('2d');
      ctx.drawImage(bitmap, 0, 0);
      images.push({ width: bitmap.width, height: bitmap.height, data: ctx.getImageData(0, 0, bitmap.width, bitmap.height).data });
    }
    // eslint-disable-next-line no-new-func
    return new Function(`return (${fnText})`)()(images, args);
  }, [b64, fn.toString(), args]);
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  const [cmd, ...args] = line.trim().split(/\s+/);
  if (!cmd) continue;
  if (cmd === 'quit') break;
  const t = Date.now();
  try {
    if (!commands[cmd]) throw new Error(`no command ${cmd}`);
    out({ ok: true, ...(await commands[cmd](...args)), ms: Date.now() - t });
  } catch (e) {
    log(`${cmd} ${args.join(' ')}: ${e.stack || e}`);
    out({ ok: false, error: String(e.message || e).split('\n')[0], ms: Date.now() - t });
  }
}
await browser.close();
// stdin may still be open (the shell holds the pipe): end here.
process.exit(0);

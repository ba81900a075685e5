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
//   close CTX | quit
// Every reply has "ok" (false with "error" when the command threw).
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
  async close(name) {
    const c = contexts.get(name);
    contexts.delete(name);
    if (c) await c.context.close();
    return {};
  },
};

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

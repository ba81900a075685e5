// A sandbox's graphical desktop (docs/api.md, "The desktop"): started or
// shown, a screenshot as PNG bytes, and the actions of Anthropic's
// computer-use tool: `action()` takes any of them as a tool call gives
// it, the other methods are shorthands. Coordinates are the screen's pixels.
import type { Transport } from './http.js';
import { pathOf, readAll } from './http.js';
import { ProtocolError } from './errors.js';
import type { DesktopAction, DesktopActionResult, DesktopInfo, MouseButton } from './types.js';

type Signal = { signal?: AbortSignal };

const CLICKS: Record<string, DesktopAction['action']> = {
  'left 1': 'left_click', 'right 1': 'right_click', 'middle 1': 'middle_click', 'left 2': 'double_click', 'left 3': 'triple_click',
};

/** `[x, y]`, or undefined for neither (the pointer's place). */
function point(x: number | undefined, y: number | undefined): [number, number] | undefined {
  if (x === undefined && y === undefined) return undefined;
  if (x === undefined || y === undefined) throw new TypeError('desktop: give both x and y, or neither (where the pointer is)');
  return [x, y];
}

export class Desktop {
  constructor(private readonly transport: Transport, readonly sandboxId: string) {}

  private route(...rest: string[]): string {
    return pathOf('v1', 'sandboxes', this.sandboxId, 'desktop', ...rest);
  }

  /**
   * Starts the desktop unless one runs (display :1, 1280 x 800 unless
   * given); a running one is only reported (`started: false`, its own
   * display and size). Retried like a GET: it starts one desktop however
   * often it is asked.
   */
  async start(opts: { display?: number; width?: number; height?: number } & Signal = {}): Promise<DesktopInfo> {
    const r = await this.transport.json<{ desktop: DesktopInfo; warnings?: string[] }>({
      method: 'POST', path: this.route(), json: { display: opts.display, width: opts.width, height: opts.height },
      idempotent: true, signal: opts.signal,
    });
    return { ...r.desktop, warnings: r.warnings ?? [] };
  }

  /** Whether it runs, its display, size and links. */
  async status(opts: Signal = {}): Promise<DesktopInfo> {
    return (await this.transport.json<{ desktop: DesktopInfo }>({ method: 'GET', path: this.route(), signal: opts.signal })).desktop;
  }

  /** The screen as PNG bytes, scaled down to at most `maxWidth` pixels wide (aspect kept) when given. */
  async screenshot(opts: { maxWidth?: number } & Signal = {}): Promise<Buffer> {
    const res = await this.transport.send({
      method: 'GET', path: this.route('screenshot'), query: { maxWidth: opts.maxWidth }, signal: opts.signal,
    });
    return readAll(res);
  }

  /** One computer-use action (never re-sent: a click may have happened); its result. */
  async action(body: DesktopAction, opts: Signal = {}): Promise<DesktopActionResult> {
    const r = await this.transport.json<{ result?: DesktopActionResult }>({
      method: 'POST', path: this.route('actions'), json: body, signal: opts.signal,
    });
    return r.result ?? {};
  }

  /** `[x0, y0, x1, y1]` of the screen as PNG bytes, at full resolution. */
  async zoom(region: [number, number, number, number], opts: Signal = {}): Promise<Buffer> {
    const { png } = await this.action({ action: 'zoom', region }, opts);
    if (typeof png !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(png)) throw new ProtocolError('zoom: the image is not base64');
    return Buffer.from(png, 'base64');
  }

  /**
   * Clicks `button` (default left) at (x, y) (default where the pointer
   * is), `count` times (2 and 3 with the left button), with the `hold`
   * keys down ("shift", "ctrl+shift").
   */
  async click(x?: number, y?: number, opts: { button?: MouseButton; count?: 1 | 2 | 3; hold?: string } & Signal = {}): Promise<void> {
    const action = CLICKS[`${opts.button ?? 'left'} ${opts.count ?? 1}`];
    if (!action) throw new TypeError('desktop: button is left, right or middle; count 2 or 3 only with the left button');
    await this.action({ action, coordinate: point(x, y), text: opts.hold }, opts);
  }

  /** Moves the pointer to (x, y). */
  async move(x: number, y: number, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'mouse_move', coordinate: point(x, y) }, opts);
  }

  /** Presses the left button at `from`, moves to `to`, releases it. */
  async drag(from: [number, number], to: [number, number], opts: Signal = {}): Promise<void> {
    await this.action({ action: 'left_click_drag', start_coordinate: from, coordinate: to }, opts);
  }

  /** Presses the left button (at (x, y) when given). */
  async mouseDown(x?: number, y?: number, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'left_mouse_down', coordinate: point(x, y) }, opts);
  }

  /** Releases the left button (at (x, y) when given). */
  async mouseUp(x?: number, y?: number, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'left_mouse_up', coordinate: point(x, y) }, opts);
  }

  /** Turns the wheel `amount` clicks (default 3) at (x, y) (undefined: where the pointer is), with the `hold` keys down. */
  async scroll(x: number | undefined, y: number | undefined, direction: 'up' | 'down' | 'left' | 'right',
    amount = 3, opts: { hold?: string } & Signal = {}): Promise<void> {
    await this.action({ action: 'scroll', coordinate: point(x, y), scroll_direction: direction, scroll_amount: amount, text: opts.hold }, opts);
  }

  /** Types `text` (line breaks as Return; at most 4096 bytes). */
  async type(text: string, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'type', text }, opts);
  }

  /** Presses key combinations, xdotool's names: "ctrl+s", "Return", "ctrl+a Delete". */
  async key(keys: string, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'key', text: keys }, opts);
  }

  /** Holds key combinations down for `seconds` (0 to 100). */
  async holdKey(keys: string, seconds: number, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'hold_key', text: keys, duration: seconds }, opts);
  }

  /** Where the pointer is. */
  async cursorPosition(opts: Signal = {}): Promise<{ x: number; y: number }> {
    const r = await this.action({ action: 'cursor_position' }, opts);
    return { x: Number(r.x ?? 0), y: Number(r.y ?? 0) };
  }

  /** Waits `seconds` (0 to 100) in the guest, as the tool's `wait` does. */
  async wait(seconds: number, opts: Signal = {}): Promise<void> {
    await this.action({ action: 'wait', duration: seconds }, opts);
  }
}

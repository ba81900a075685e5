# sbxd part "desktop" (sourced by session.sh; needs the full image, like
# full_image): the desktop of a sandbox (docs/api.md, "The desktop";
# issue 16 items 4-5), seen by a real headless Chromium on this side
# (tests/browser/probe.mjs) and driven through the REST actions:
#  1. POST …/desktop starts Xtigervnc + XFCE and gives the two links;
#  2. the guest shows a known picture: Chromium in kiosk mode on a page of
#     one colour with a text area and a button (desktop_page below);
#  3. the desktop link in the browser: noVNC connects and its canvas shows
#     the page's colour (the picture went guest -> VNC -> agent -> vsock ->
#     sbxd -> WebSocket -> browser);
#  4. `type` into the text area: the API's screenshot of that region
#     changes; `left_click` on the button turns the page blue, in the API's
#     screenshot and on the browser's canvas, live; `cursor_position` is
#     where the click was;
#  5. the view-only link shows the same screen;
#  6. stop with memory + resume: the session runs on and the browser
#     connects again to the same picture.
# The screenshots are kept in $logdir (desktop-*.png) as the test's
# artifacts.
# shellcheck shell=bash

probe_ready desktop || return 0
# The page: the body's colour is what the checks look for; the button
# turns it blue. Coordinates are the screen's (kiosk: full screen).
dk_page='data:text/html,<body style="margin:0;height:100vh;background:%2300c000">'
dk_page+='<textarea id=t style="position:absolute;left:100px;top:100px;width:500px;height:200px;font-size:48px;border:0;background:%23ffffff;color:%23000000"></textarea>'
dk_page+='<button style="position:absolute;left:800px;top:100px;width:200px;height:120px;font-size:40px" '
dk_page+='onclick="document.body.style.background=%27%230000c0%27">go</button></body>'
dk_green='#00c000' dk_blue='#0000c0'
# dk_action JSON: one action; the reply in $body.
dk_action() { api POST "/v1/sandboxes/$dk/desktop/actions" "$1"; }
# dk_shot NAME: the API's screenshot into $logdir/desktop-NAME.png.
dk_shot() {
  curl -sS --unix-socket "$sock" -o "$logdir/desktop-$1.png" -w '%{http_code}' --max-time 900 \
    "http://sbxd/v1/sandboxes/$dk/desktop/screenshot"
}
# dk_png NAME X Y: the colour of the screenshot's pixel.
dk_png() { br_do png "$logdir/desktop-$1.png" "$2" "$3"; py "b.get('colors', [b.get('error')])[0]" 2>/dev/null; }
# dk_blue_now: the screen (an API screenshot) shows the blue page.
dk_blue_now() { [ "$(dk_shot after-click)" = 200 ] && [ "$(dk_png after-click 50 50)" = "$dk_blue" ]; }

# dk_diag: what the guest's desktop is doing, as SBXD-DIAG lines: the
# agent's processes (the X server, the session, Chromium) with the end of
# each one's output, the guest's own view of them and the X windows.
dk_diag() {
  local procs body_was=$body code_was=$code
  api GET "/v1/sandboxes/$dk/processes"
  procs=$(py "' '.join(p['id'] for p in b.get('processes', []))" 2>/dev/null)
  py "'\\n'.join('SBXD-DIAG: desktop: process %s %s running %s exit %s' % (p['id'], ' '.join(p['command'])[:120], p['running'], p['exitCode']) for p in b.get('processes', []))" 2>/dev/null
  for p in $procs; do
    api GET "/v1/sandboxes/$dk/processes/$p"
    py "'\\n'.join('SBXD-DIAG: desktop: %s: %s' % ('$p', l) for l in __import__('base64').b64decode(b['process'].get('tail') or '').decode('utf-8', 'replace').splitlines()[-15:])" 2>/dev/null
  done
  sbxc exec "$dk" --timeout 2m -- sh -c 'ps -eo pid,user,etime,args | grep -E "[X]tigervnc|[x]fce|[d]bus|[c]hromium" | cut -c1-160;
    DISPLAY=:1 xwininfo -root -children 2>&1 | head -n 20' 2>&1 | sed 's/^/SBXD-DIAG: desktop: guest: /'
  body=$body_was code=$code_was
}

probe_home desktop
t=$(now)
api POST /v1/sandboxes '{"from":"default","cold":true,"cpus":1,"memoryMib":1536,"noAutoStop":true,"labels":{"test":"desktop"}}'
check "desktop: create from the default image answers 201" 201 "$code"
dk=$(py "b['sandbox']['id']" 2>/dev/null)
echo "SBXD-TIME: desktop create (cold) $(elapsed "$t") s"
if [ "$code" = 201 ] && [ -n "$dk" ]; then
  # 1. The desktop and its links.
  t=$(now)
  api POST "/v1/sandboxes/$dk/desktop" '{"width":1280,"height":800}'
  check "desktop: start answers 200" 200 "$code"
  echo "SBXD-TIME: desktop start $(elapsed "$t") s"
  check "desktop: the X server runs, 1280x800" "True 1280x800" \
    "$(py "'%s %sx%s' % (b['desktop']['running'], b['desktop']['width'], b['desktop']['height'])" 2>/dev/null)"
  dk_url=$(py "b['desktop']['url']" 2>/dev/null)
  dk_view=$(py "b['desktop']['viewOnlyUrl']" 2>/dev/null)
  # The session (dbus-launch, startxfce4) as the agent sees it.
  dk_session() { api GET "/v1/sandboxes/$dk/desktop"; [ "$(py "b['desktop']['sessionRunning']" 2>/dev/null)" = True ]; }
  WAIT_INTERVAL=2 wait_until 300 "the desktop session" dk_session
  check "desktop: the XFCE session runs" 0 "$?" || dk_diag
  case $dk_url in https://*-desktop.sbx.localhost:8443/vnc.html\?*) ok "desktop: the link is $dk_url" ;;
    *) bad "desktop: the desktop link: '$dk_url'" ;; esac
  case $dk_view in https://*-view.sbx.localhost:8443/vnc.html\?*view_only=true*) ok "desktop: the view-only link" ;;
    *) bad "desktop: the view-only link: '$dk_view'" ;; esac

  # The probe's browser also decodes the screenshots (dk_png).
  probe_start desktop

  # 2. The known picture, as the desktop's user.
  sbxc exec "$dk" --detach -- env DISPLAY=:1 chromium --kiosk --no-first-run --disable-gpu \
    --user-data-dir=/tmp/dk-kiosk "$dk_page" >/dev/null 2>&1
  check "desktop: Chromium starts in the guest (exec --detach)" 0 "$?"
  dk_green_now() { [ "$(dk_shot page)" = 200 ] && [ "$(dk_png page 50 50)" = "$dk_green" ]; }
  WAIT_INTERVAL=5 wait_until 600 "the page on the guest's screen" dk_green_now
  check "desktop: the API's screenshot shows the page" "$dk_green" "$(dk_png page 50 50)" || dk_diag

  # 3. The browser on the desktop link.
  t=$(now)
  br_do vnc a "$dk_url"
  check "desktop: noVNC connects in the browser, canvas 1280x800" "True 1280x800" \
    "$(py "'%s %sx%s' % (b['ok'], b.get('width'), b.get('height')) if b['ok'] else b['error']" 2>/dev/null)"
  echo "SBXD-TIME: desktop noVNC connect $(elapsed "$t") s"
  br_do pixel a 50 50 "$dk_green"
  check "desktop: the browser's canvas shows the page's colour" "True $dk_green" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"

  # 4. type, then the region's pixels changed; a click on the button.
  dk_action '{"action":"left_click","coordinate":[350,200]}'
  check "desktop: left_click in the text area answers 200" 200 "$code"
  dk_shot before-type >/dev/null
  dk_action '{"action":"type","text":"HELLO SANDBOX"}'
  check "desktop: type answers 200" 200 "$code"
  dk_typed() {
    [ "$(dk_shot after-type)" = 200 ] || return 1
    br_do pngdiff "$logdir/desktop-before-type.png" "$logdir/desktop-after-type.png" 100 100 600 300
    [ "$(py "b.get('differ', 0) > 500" 2>/dev/null)" = True ]
  }
  WAIT_INTERVAL=2 wait_until 300 "the typed text on the screen" dk_typed
  check "desktop: the typed text changed the text area's pixels" True "$(py "b.get('differ', 0) > 500" 2>/dev/null)"
  br_do pngdiff "$logdir/desktop-before-type.png" "$logdir/desktop-after-type.png" 800 400 1280 800
  check "desktop: ... and nothing below the button" 0 "$(py "b.get('differ', b.get('error'))" 2>/dev/null)"
  dk_action '{"action":"left_click","coordinate":[900,160]}'
  check "desktop: left_click on the button answers 200" 200 "$code"
  WAIT_INTERVAL=2 wait_until 300 "the blue page" dk_blue_now
  check "desktop: the click turned the page blue (API screenshot)" "$dk_blue" "$(dk_png after-click 50 50)"
  br_do pixel a 50 50 "$dk_blue"
  check "desktop: ... and the browser's canvas, live" "True $dk_blue" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"
  dk_action '{"action":"cursor_position"}'
  check "desktop: cursor_position is where the click was" "900 160" \
    "$(py "'%s %s' % (b['result']['x'], b['result']['y'])" 2>/dev/null)"
  dk_action '{"action":"zoom","region":[0,0,320,200]}'
  check "desktop: zoom gives the region's PNG" "320x200" \
    "$(py "'%sx%s' % (b['result']['width'], b['result']['height'])" 2>/dev/null)"

  # The Python SDK on the same desktop: a move, where the pointer is, and
  # a scaled screenshot (PNG's IHDR: width and height, big-endian, at 16).
  dk_sdk=$(cd "$here/../../../sdk/python" && SBX_HOST=unix:$sock timeout 900 /usr/bin/python3 -S -c '
import struct, sys
sys.path.insert(0, ".")
from sandboxer import Sandboxer
d = Sandboxer(timeout=900).get(sys.argv[1]).desktop
d.move(640, 400)
png = d.screenshot(max_width=640)
print(d.cursor_position(), png[:8] == b"\x89PNG\r\n\x1a\n", struct.unpack(">II", png[16:24]))
' "$dk" 2>&1)
  check "desktop: the Python SDK moves the pointer and takes a 640-wide screenshot" \
    "(640, 400) True (640, 400)" "$(printf '%s\n' "$dk_sdk" | tail -n 1)"

  # 5. The view-only link shows the same screen.
  br_do vnc v "$dk_view"
  check "desktop: the view-only link connects" True "$(py "b['ok']" 2>/dev/null)"
  br_do pixel v 50 50 "$dk_blue"
  check "desktop: ... and shows the screen" "True $dk_blue" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"
  br_do close v
  br_do close a

  # 6. Stop with memory and resume: the session and the page run on.
  t=$(now)
  api POST "/v1/sandboxes/$dk/stop" '{}'
  check "desktop: stop with memory answers 200" 200 "$code"
  api POST "/v1/sandboxes/$dk/resume" '{}'
  check "desktop: resume restores the memory" True "$(py "b['memoryRestored']" 2>/dev/null)"
  echo "SBXD-TIME: desktop stop+resume $(elapsed "$t") s"
  api GET "/v1/sandboxes/$dk/desktop"
  check "desktop: after resume the session runs, with the same link" "True True $dk_url" \
    "$(py "'%s %s %s' % (b['desktop']['running'], b['desktop']['sessionRunning'], b['desktop']['url'])" 2>/dev/null)"
  br_do vnc a "$dk_url"
  check "desktop: the browser connects again" True "$(py "b['ok']" 2>/dev/null)"
  br_do pixel a 50 50 "$dk_blue"
  check "desktop: ... to the same picture" "True $dk_blue" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"
  probe_end desktop
else
  printf '%s\n' "$body" | head -c 2000
fi
[ -z "$dk" ] || api DELETE "/v1/sandboxes/$dk"
check "desktop: delete answers 200" 200 "$code"

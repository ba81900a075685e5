# sbxd part "desktop" (sourced by session.sh; needs the full image, like
# full_image): the desktop of a sandbox (docs/api.md, "The desktop";
# issue 16 items 4-5), seen by a real headless Chromium on this side
# (tests/browser/probe.mjs) and driven through the REST actions:
#  1. POST …/desktop starts Xtigervnc + XFCE and gives the two links;
#  2. the guest shows a known picture, as the desktop's user: a green
#     window with a button (xmessage; a click on the button replaces it
#     with a blue one) and a text editor (xfce4-terminal running cat
#     into a file);
#  3. the desktop link in the browser: noVNC connects and its canvas shows
#     the green (the picture went guest -> VNC -> agent -> vsock -> sbxd
#     -> WebSocket -> browser);
#  4. `type` into the editor: the API's screenshot of its region changes
#     and the green window's does not, and `key Return` hands the line to
#     the program in it; `left_click` on the button turns the window
#     blue, in the API's screenshot and on the browser's canvas, live;
#     `cursor_position` is where the click was;
#  5. the view-only link shows the same screen;
#  6. stop with memory + resume: the session runs on and the browser
#     connects again to the same picture.
# The screenshots are kept in $logdir (desktop-*.png) as the test's
# artifacts. Not Chromium in kiosk mode as the picture: in a one-vCPU
# guest of the nested harness its window stayed white for 10 minutes (its
# renderer started 6 minutes after it, 2026-12-07), and a step that waits
# on it tells nothing of the desktop's own path.
# shellcheck shell=bash

probe_ready desktop || return 0
dk_green='#00c000' dk_blue='#0000c0'
# The known picture's windows, placed where XFCE's panels are not (the
# window manager honours a user-given position; the checks read where
# the windows really are).
dk_button_page="xmessage -title sbx-button-page -geometry 500x300+700+400 -bg '$dk_green' -fg '$dk_green' -buttons go:7 ' '"
dk_button_page+="; [ \$? = 7 ] && exec xmessage -title sbx-clicked -geometry 500x300+700+400 -bg '$dk_blue' -fg '$dk_blue' ' '"
dk_editor=(xfce4-terminal --disable-server -T sbx-editor --geometry 30x4+60+120 --hide-menubar --hide-toolbar
  --hide-scrollbar --color-bg '#ffffff' --color-text '#000000' --font 'DejaVu Sans Mono 24'
  -x sh -c 'exec cat >/tmp/sbx-typed')
# dk_action JSON: one action; the reply in $body.
dk_action() { api POST "/v1/sandboxes/$dk/desktop/actions" "$1"; }
# dk_shot NAME: the API's screenshot into $logdir/desktop-NAME.png.
dk_shot() {
  curl -sS --unix-socket "$sock" -o "$logdir/desktop-$1.png" -w '%{http_code}' --max-time 900 \
    "http://sbxd/v1/sandboxes/$dk/desktop/screenshot"
}
# dk_png NAME X Y: the colour of the screenshot's pixel.
dk_png() { br_do png "$logdir/desktop-$1.png" "$2" "$3"; py "b.get('colors', [b.get('error')])[0]" 2>/dev/null; }
# dk_pixel X Y: the colour on the guest's screen at X Y, through the zoom
# action on an 8x8 region (a full screenshot is a 1280x800 PNG the guest
# encodes: seconds of its one vCPU here, taken from what the checks wait
# for).
dk_pixel() {
  dk_action "{\"action\":\"zoom\",\"region\":[$1,$2,$(($1 + 8)),$(($2 + 8))]}"
  [ "$code" = 200 ] || { echo "zoom $code"; return; }
  py "b['result']['png']" 2>/dev/null | base64 -d >"$w/desktop-pixel.png" 2>/dev/null
  br_do png "$w/desktop-pixel.png" 0 0
  py "b.get('colors', [b.get('error')])[0]" 2>/dev/null
}
# dk_pixel_is X Y COLOUR: the screen shows COLOUR at X Y.
dk_pixel_is() { [ "$(dk_pixel "$1" "$2")" = "$3" ]; }
# dk_guest CMD: CMD in the guest as the desktop's user, on its display.
dk_guest() { sbxc exec "$dk" --timeout 5m -- env DISPLAY=:1 sh -c "$1" 2>&1; }
# dk_window TITLE: "X Y W H" of the window's client area on the screen.
dk_window() {
  dk_guest "xwininfo -name '$1'" | sed -n 's/^ *Absolute upper-left [XY]: *//p; s/^ *Width: *//p; s/^ *Height: *//p' | xargs
}
# dk_button: the centre of the button in the window sbx-button-page: of
# that window's subwindows (xwininfo -tree: W x H, then the absolute
# position), the smallest (Xaw's form, text, its scrollbar, the button).
dk_button() {
  local line re='([0-9]+)x([0-9]+)\+-?[0-9]+\+-?[0-9]+ +\+(-?[0-9]+)\+(-?[0-9]+)$' best='' a x y
  while IFS= read -r line; do
    [[ $line =~ $re ]] || continue
    a=$((BASH_REMATCH[1] * BASH_REMATCH[2]))
    if [ -z "$best" ] || [ "$a" -lt "$best" ]; then
      best=$a x=$((BASH_REMATCH[3] + BASH_REMATCH[1] / 2)) y=$((BASH_REMATCH[4] + BASH_REMATCH[2] / 2))
    fi
  done < <(dk_guest "xwininfo -tree -name sbx-button-page")
  [ -n "$best" ] && echo "$x $y"
}

# dk_diag: what the guest's desktop is doing, as SBXD-DIAG lines: the
# agent's processes (the X server, the session, the picture's programs)
# with the end of each one's output, the guest's own view of them and the
# X windows.
dk_diag() {
  local procs body_was=$body code_was=$code
  api GET "/v1/sandboxes/$dk/processes"
  procs=$(py "' '.join(p['id'] for p in b.get('processes', []))" 2>/dev/null)
  py "'\\n'.join('SBXD-DIAG: desktop: process %s %s running %s exit %s' % (p['id'], ' '.join(p['command'])[:120], p['running'], p['exitCode']) for p in b.get('processes', []))" 2>/dev/null
  for p in $procs; do
    api GET "/v1/sandboxes/$dk/processes/$p"
    py "'\\n'.join('SBXD-DIAG: desktop: %s: %s' % ('$p', l) for l in __import__('base64').b64decode(b['process'].get('tail') or '').decode('utf-8', 'replace').splitlines()[-15:])" 2>/dev/null
  done
  dk_guest 'ps -eo pid,user,etime,args | grep -E "[X]tigervnc|[x]fce|[d]bus|[x]message|[c]at$" | cut -c1-160;
    xwininfo -root -children 2>&1 | head -n 40' | sed 's/^/SBXD-DIAG: desktop: guest: /'
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

  # The probe's browser also decodes the screenshots (dk_png, dk_pixel).
  probe_start desktop

  # 2. The known picture, as the desktop's user: the green window with
  # its button, then the editor (mapped last: on top, with the focus).
  t=$(now)
  sbxc exec "$dk" --detach -- env DISPLAY=:1 sh -c "$dk_button_page" >/dev/null 2>&1
  check "desktop: the button window starts (exec --detach)" 0 "$?"
  dk_has_window() { [ -n "$(dk_window "$1")" ]; }
  WAIT_INTERVAL=3 wait_until 600 "the window sbx-button-page" dk_has_window sbx-button-page
  read -r dk_wx dk_wy dk_ww dk_wh <<<"$(dk_window sbx-button-page)"
  check "desktop: the button window is on the screen, 500x300" 500x300 "${dk_ww:-?}x${dk_wh:-?}" || dk_diag
  # a point inside it, clear of its frame and text (Xaw's text area)
  dk_px=$((${dk_wx:-700} + 300)) dk_py=$((${dk_wy:-400} + 150))
  WAIT_INTERVAL=3 wait_until 300 "the green window on the guest's screen" dk_pixel_is "$dk_px" "$dk_py" "$dk_green"
  check "desktop: the zoom action shows the green window at $dk_px,$dk_py" "$dk_green" "$(dk_pixel "$dk_px" "$dk_py")" || dk_diag
  sbxc exec "$dk" --detach -- env DISPLAY=:1 "${dk_editor[@]}" >/dev/null 2>&1
  check "desktop: the editor starts (exec --detach)" 0 "$?"
  WAIT_INTERVAL=3 wait_until 600 "the window sbx-editor" dk_has_window sbx-editor
  read -r dk_ex dk_ey dk_ew dk_eh <<<"$(dk_window sbx-editor)"
  check "desktop: the editor is on the screen" yes "$([ "${dk_ew:-0}" -gt 100 ] && [ "${dk_eh:-0}" -gt 50 ] && echo yes)" || dk_diag
  # painted: its lower right is the editor's white (the text starts top left)
  WAIT_INTERVAL=3 wait_until 300 "the editor painted" dk_pixel_is $((dk_ex + dk_ew - 30)) $((dk_ey + dk_eh - 30)) '#ffffff'
  check "desktop: ... painted white" 0 "$?"
  echo "SBXD-TIME: desktop the known picture $(elapsed "$t") s"
  check "desktop: the API's screenshot answers 200" 200 "$(dk_shot page)"
  check "desktop: ... and shows the green window" "$dk_green" "$(dk_png page "$dk_px" "$dk_py")"

  # 3. The browser on the desktop link.
  t=$(now)
  br_do vnc a "$dk_url"
  check "desktop: noVNC connects in the browser, canvas 1280x800" "True 1280x800" \
    "$(py "'%s %sx%s' % (b['ok'], b.get('width'), b.get('height')) if b['ok'] else b['error']" 2>/dev/null)"
  echo "SBXD-TIME: desktop noVNC connect $(elapsed "$t") s"
  br_do pixel a "$dk_px" "$dk_py" "$dk_green"
  check "desktop: the browser's canvas shows the green window" "True $dk_green" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"

  # 4. type into the editor: its pixels change, the rest of the screen's
  # do not (the green window's inside; not the panels, whose clock runs).
  dk_action "{\"action\":\"left_click\",\"coordinate\":[$((dk_ex + dk_ew / 2)),$((dk_ey + dk_eh / 2))]}"
  check "desktop: left_click in the editor answers 200" 200 "$code"
  dk_shot before-type >/dev/null
  dk_action '{"action":"type","text":"HELLO SANDBOX"}'
  check "desktop: type answers 200" 200 "$code"
  dk_typed() {
    [ "$(dk_shot after-type)" = 200 ] || return 1
    br_do pngdiff "$logdir/desktop-before-type.png" "$logdir/desktop-after-type.png" "$dk_ex" "$dk_ey" $((dk_ex + dk_ew)) $((dk_ey + dk_eh))
    [ "$(py "b.get('differ', 0) > 500" 2>/dev/null)" = True ]
  }
  WAIT_INTERVAL=5 wait_until 300 "the typed text on the screen" dk_typed
  check "desktop: the typed text changed the editor's pixels" True "$(py "b.get('differ', 0) > 500" 2>/dev/null)"
  br_do pngdiff "$logdir/desktop-before-type.png" "$logdir/desktop-after-type.png" \
    $((dk_wx + 20)) $((dk_wy + 20)) $((dk_wx + dk_ww - 20)) $((dk_wy + dk_wh - 40))
  check "desktop: ... and not the green window's" 0 "$(py "b.get('differ', b.get('error'))" 2>/dev/null)"
  # The typed line reached the program in the editor: Return ends the line cat writes.
  dk_action '{"action":"key","text":"Return"}'
  check "desktop: key Return answers 200" 200 "$code"
  dk_got() { [ "$(dk_guest 'cat /tmp/sbx-typed')" = "HELLO SANDBOX" ]; }
  WAIT_INTERVAL=3 wait_until 120 "the typed line in the editor's program" dk_got
  check "desktop: the editor's program read the typed line" "HELLO SANDBOX" "$(dk_guest 'cat /tmp/sbx-typed')"
  # The button: xmessage exits 7 and the blue window takes its place.
  dk_btn=$(dk_button)
  dk_bx=${dk_btn% *} dk_by=${dk_btn#* }
  check "desktop: the button is inside the green window" yes \
    "$([ -n "$dk_btn" ] && [ "$dk_bx" -gt "$dk_wx" ] && [ "$dk_by" -gt "$dk_wy" ] && [ "$dk_bx" -lt $((dk_wx + dk_ww)) ] && [ "$dk_by" -lt $((dk_wy + dk_wh)) ] && echo yes)" ||
    echo "SBXD-DIAG: desktop: button '$dk_btn', window $dk_wx $dk_wy $dk_ww $dk_wh"
  dk_action "{\"action\":\"left_click\",\"coordinate\":[${dk_bx:-0},${dk_by:-0}]}"
  check "desktop: left_click on the button answers 200" 200 "$code"
  WAIT_INTERVAL=3 wait_until 300 "the blue window" dk_pixel_is "$dk_px" "$dk_py" "$dk_blue"
  check "desktop: the click turned the window blue (zoom action)" "$dk_blue" "$(dk_pixel "$dk_px" "$dk_py")" || dk_diag
  check "desktop: ... and the API's screenshot" "$dk_blue" "$([ "$(dk_shot after-click)" = 200 ] && dk_png after-click "$dk_px" "$dk_py")"
  br_do pixel a "$dk_px" "$dk_py" "$dk_blue"
  check "desktop: ... and the browser's canvas, live" "True $dk_blue" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"
  dk_action '{"action":"cursor_position"}'
  check "desktop: cursor_position is where the click was" "$dk_bx $dk_by" \
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
  br_do pixel v "$dk_px" "$dk_py" "$dk_blue"
  check "desktop: ... and shows the screen" "True $dk_blue" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"
  br_do close v
  br_do close a

  # 6. Stop with memory and resume: the session and its windows run on.
  stop_resume desktop "$dk"
  api GET "/v1/sandboxes/$dk/desktop"
  check "desktop: after resume the session runs, with the same link" "True True $dk_url" \
    "$(py "'%s %s %s' % (b['desktop']['running'], b['desktop']['sessionRunning'], b['desktop']['url'])" 2>/dev/null)"
  br_do vnc a "$dk_url"
  check "desktop: the browser connects again" True "$(py "b['ok']" 2>/dev/null)"
  br_do pixel a "$dk_px" "$dk_py" "$dk_blue"
  check "desktop: ... to the same picture" "True $dk_blue" \
    "$(py "'%s %s' % (b.get('matched'), b.get('color', b.get('error')))" 2>/dev/null)"
  probe_end desktop
else
  printf '%s\n' "$body" | head -c 2000
fi
[ -z "$dk" ] || api DELETE "/v1/sandboxes/$dk"
check "desktop: delete answers 200" 200 "$code"

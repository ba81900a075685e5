# sbxd part "browser" (sourced by session.sh): the hosted URLs of a real
# app in a real sandbox (hosted_app.py), opened by a real headless
# Chromium (Debian's, driven by playwright-core: tests/browser/probe.mjs)
# through sbxd's HTTPS proxy, which the browser trusts through sbxd's CA
# in an NSS database of its own (no certificate error is ignored). In the
# browser: a private URL without its token is Sandboxer's 401 page; the
# tokenUrl ends on the clean URL with the app's page and leaves an
# HttpOnly Secure __sbx_auth cookie that the page's script cannot read;
# that cookie alone admits later navigations, a fresh context is refused;
# a WebSocket and an EventSource from the page's script work through the
# proxy; a --public URL needs nothing; a request to a paused sandbox wakes
# it and is answered by the same process. sbxd is restarted with a 2 s
# idle minute for the wake (as in hosted.sh), and again after.
# tests/guest/sbxd.sh runs `npm ci` in tests/browser at level 0 (level 1
# has no network). Needs Debian's chromium and libnss3-tools, and node.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, logdir, here:
# shellcheck disable=SC2154

probe_ready browser || return 0
br_port=8443  # sbxd's default --proxy-listen tcp:127.0.0.1:8443
kill "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
start_sbxd --idle-minute-seconds 2

probe_home browser
api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"browser"}}'
check "browser: create answers 201" 201 "$code"
br=$(py "b['sandbox']['id']" 2>/dev/null)
sbxc scp "$here/hosted_app.py" "$br:/root/hosted_app.py" >/dev/null 2>&1
check "browser: the app is in the guest" 0 "$?"
for br_app_port in 8080 8082; do
  agent "$br" exec --detach -- python3 /root/hosted_app.py 0.0.0.0 "$br_app_port" >>"$logdir/browser-apps.log" 2>&1
  check "browser: the app on $br_app_port starts (exec --detach)" 0 "$?"
done
br_listens() { agent "$br" exec -- sh -c "ss -ltn | grep -q ':8080 ' && ss -ltn | grep -q ':8082 '" >/dev/null 2>&1; }
wait_until 120 "the apps in $br" br_listens
br_listening=$?
check "browser: the apps listen in the guest" 0 "$br_listening"
[ "$br_listening" = 0 ] ||
  echo "browser: listening in $br: $(agent "$br" exec -- ss -ltn 2>&1 | awk 'NR > 1 { print $4 }' | xargs)"
body=$(sbxc --json host "$br" 8080 2>/dev/null | tail -n 1)
br_url=$(py "b['hostedPort']['url']" 2>/dev/null)
br_token=$(py "b['hostedPort']['token']" 2>/dev/null)
br_token_url=$(py "b['hostedPort']['tokenUrl']" 2>/dev/null)
body=$(sbxc --json host "$br" 8082 --public 2>/dev/null | tail -n 1)
br_public_url=$(py "b['hostedPort']['url']" 2>/dev/null)
br_host=${br_url#https://}; br_host=${br_host%%[:/]*}
case $br_url in https://*-8080.sbx.localhost:$br_port/) ok "browser: the private URL is $br_url" ;;
  *) bad "browser: sbx host's answer: $br_url" ;; esac

probe_start browser

br_checks() {
  # 1. Private, no token: Sandboxer's own 401 page.
  br_do goto a "$br_url"
  check "browser: without the token: 401" 401 "$(py "b.get('status')" 2>/dev/null)"
  check "browser: ... Sandboxer's own page" "Sandboxer · HTTP 401" \
    "$(py "b.get('text', b.get('error')).rstrip()[-len('Sandboxer · HTTP 401'):]" 2>/dev/null)"

  # 2. The tokenUrl: a 302 to the clean URL (the token leaves the address
  # bar), the app's page, and the token as an HttpOnly Secure cookie (RFC
  # 6265 §4.1.2.5, §4.1.2.6) for this host alone (no Domain: §5.3 step 6).
  br_do goto a "$br_token_url"
  check "browser: the tokenUrl ends on the clean URL with the app's page" "200 $br_url hello from 8080" \
    "$(py "'%s %s %s' % (b.get('status'), b.get('url'), b.get('text', b.get('error')))" 2>/dev/null)"
  check "browser: ... through one 302" "302" "$(py "' '.join(str(r['status']) for r in b.get('chain', []))" 2>/dev/null)"
  br_do cookies a
  check "browser: the context holds __sbx_auth: the token, HttpOnly, Secure, this host only" \
    "__sbx_auth token True True Lax $br_host" \
    "$(py "' '.join('%s %s %s %s %s %s' % (c['name'], 'token' if c['value'] == '$br_token' else c['value'], c['httpOnly'], c['secure'], c['sameSite'], c['domain']) for c in b['cookies']) if 'cookies' in b else b.get('error')" 2>/dev/null)"
  br_do doccookie a sbx_probe=1
  check "browser: document.cookie shows the page's own cookie, never __sbx_auth" "sbx_probe=1" \
    "$(py "b.get('cookie', b.get('error'))" 2>/dev/null)"

  # 3. The cookie alone admits; another context (another jar) is refused.
  br_do goto a "$br_url"
  check "browser: a later navigation with the cookie alone: the app" "200 hello from 8080" \
    "$(py "'%s %s' % (b.get('status'), b.get('text', b.get('error')))" 2>/dev/null)"
  br_do goto a "${br_url}headers"
  check "browser: the app sees the page's cookie, never the token" "sbx_probe=1 False" \
    "$(py "(lambda h: '%s %s' % (h.get('cookie'), '$br_token' in b['text']))(__import__('json').loads(b['text']))" 2>/dev/null)"
  br_do goto b "$br_url"
  check "browser: a fresh context: 401" 401 "$(py "b.get('status', b.get('error'))" 2>/dev/null)"
  br_do close b

  # 4. A WebSocket (RFC 6455) from the page's script (still on the app's
  # origin), admitted by the cookie its handshake carries.
  br_do ws a /ws ping-1 ping-2
  check "browser: a WebSocket from the page echoes through the proxy" "wss://$br_host:$br_port/ws echo: ping-1 echo: ping-2" \
    "$(py "' '.join([b.get('url', str(b.get('error')))] + b.get('messages', []))" 2>/dev/null)"

  # 5. An EventSource (HTML, "Server-sent events"): both events, in order,
  # each as it is sent (the app sends "two" 3 s after "one"), not the whole
  # stream at its end.
  br_do sse a /sse
  check "browser: an EventSource from the page gets one, then two" "one two" \
    "$(py "' '.join(e['data'] for e in b.get('events', [])) or b.get('error')" 2>/dev/null)"
  check "browser: ... as they are sent (>= 2 s apart)" True \
    "$(py "len(b['events']) == 2 and b['events'][1]['at'] - b['events'][0]['at'] >= 2000" 2>/dev/null)"

  # 6. A --public URL in a fresh context: no token, no cookie.
  br_do goto c "$br_public_url"
  check "browser: a --public URL opens with no token" "200 hello from 8082" \
    "$(py "'%s %s' % (b.get('status'), b.get('text', b.get('error')))" 2>/dev/null)"
  br_do cookies c
  check "browser: ... and leaves no cookie" 0 "$(py "len(b['cookies'])" 2>/dev/null)"
  br_do close c

  # 7. The idle pause, then a navigation in the browser wakes the sandbox and
  # the same process answers it.
  br_do goto a "${br_url}pid"
  br_app_pid=$(py "b.get('text', b.get('error'))" 2>/dev/null)
  if [[ $br_app_pid =~ ^[0-9]+$ ]]; then ok "browser: the app's pid is $br_app_pid"; else bad "browser: /pid gave '$br_app_pid'"; fi
  api POST "/v1/sandboxes/$br/idle" '{"idleMinutes":1}'
  check "browser: idle 1 minute (2 s here)" 200 "$code"
  br_state() { api GET "/v1/sandboxes/$br"; [ "$(py "b['sandbox']['state']" 2>/dev/null)" = "$1" ]; }
  WAIT_INTERVAL=0.5 wait_until 180 "the idle pause of $br" br_state paused
  check "browser: the sandbox is paused" 0 "$?"
  br_paused_at=$(last_event)
  t=$(now)
  br_do goto a "${br_url}pid"
  check "browser: a navigation to the paused sandbox is answered by the same process" "200 $br_app_pid" \
    "$(py "'%s %s' % (b.get('status'), b.get('text', b.get('error')))" 2>/dev/null)"
  echo "SBXD-TIME: browser wake and answer $(elapsed "$t") s"
  # Its events, not its state now (a new idle pause may have begun).
  check "browser: ... woken by the navigation, and it runs again" "paused>creating:wake creating>running" \
    "$(state_changes "$br" "$br_paused_at" | cut -d' ' -f1-2)"
  api POST "/v1/sandboxes/$br/idle" '{"idleMinutes":null}'
}
if [ "$(py "b.get('ready')" 2>/dev/null)" = True ]; then
  br_checks
else
  tail -n 20 "$logdir/browser.log" | sed 's/^/browser.log: /'
fi
probe_end browser
# A delete while an idle pause is under way would be 409 (docs/api.md: one
# operation at a time); with the idle pause off, wait out one that began.
br_settled() { api GET "/v1/sandboxes/$br"; case $(py "b['sandbox']['state']" 2>/dev/null) in running | paused) ;; *) false ;; esac; }
WAIT_INTERVAL=0.5 wait_until 180 "$br to be running or paused" br_settled
api DELETE "/v1/sandboxes/$br"
check "browser: delete" 200 "$code"

kill "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
start_sbxd

# sbxd part "hosted" (sourced by session.sh): hosted ports through sbxd's
# HTTPS proxy (docs/api.md, "Hosted ports"), with the real curl and a
# WebSocket client by hand (ws_probe.py) as clients and a real app in the
# guest (hosted_app.py): a private URL gives 401 without its token, trades
# ?_token= for an HttpOnly Secure cookie, takes the token as a header, and
# never shows the secret to the app; a public one needs nothing; the app
# sees X-Forwarded-*; keep-alive reuses one connection; an SSE stream
# arrives event by event; a 50 MiB upload arrives whole; a WebSocket
# echoes; --localhost reaches an app on the guest's 127.0.0.1 (through
# the agent), the default the guest's address (over its tap); a port with
# nothing on it is Sandboxer's 502; a request to a paused sandbox wakes
# it and is answered by the same process; the URLs die with unhost and rm.
# sbxd is restarted with a 2 s idle minute for the wake, and again after.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code, body, logdir, here:
# shellcheck disable=SC2154

hp_port=8443  # sbxd's default --proxy-listen tcp:127.0.0.1:8443
kill "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
start_sbxd --idle-minute-seconds 2

sbxc ca >"$w/ca.pem" 2>"$w/ca.err"
check "hosted: sbx ca prints a certificate" "BEGIN CERTIFICATE" "$(grep -o 'BEGIN CERTIFICATE' "$w/ca.pem" | head -n 1)"
# hp_curl URL ARGS...: curl through the proxy, trusting sbxd's CA; the
# URL's host resolves to level 1's loopback (as *.localhost does anyway).
hp_curl() {
  local url=$1 host; shift
  host=${url#https://}; host=${host%%[:/]*}
  curl -sS --max-time 60 --cacert "$w/ca.pem" --resolve "$host:$hp_port:127.0.0.1" "$@" "$url"
}
hp_status() { hp_curl "$@" -o /dev/null -w '%{http_code}' 2>/dev/null; }

api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"hosted"}}'
check "hosted: create answers 201" 201 "$code"
hp=$(py "b['sandbox']['id']" 2>/dev/null)
sbxc scp "$here/hosted_app.py" "$hp:/root/hosted_app.py" >/dev/null 2>&1
check "hosted: the app is in the guest" 0 "$?"
agent "$hp" exec --detach -- python3 /root/hosted_app.py 0.0.0.0 8080 >/dev/null 2>&1
agent "$hp" exec --detach -- python3 /root/hosted_app.py 127.0.0.1 8081 >/dev/null 2>&1
hp_listens() { agent "$hp" exec -- sh -c "ss -ltn | grep -q ':8080 ' && ss -ltn | grep -q ':8081 '" >/dev/null 2>&1; }
wait_until 120 "the apps in $hp" hp_listens
check "hosted: the apps listen in the guest" 0 "$?"

body=$(sbxc --json host "$hp" 8080 2>/dev/null | tail -n 1)
hp_url=$(py "b['hostedPort']['url']" 2>/dev/null)
hp_token=$(py "b['hostedPort']['token']" 2>/dev/null)
hp_token_url=$(py "b['hostedPort']['tokenUrl']" 2>/dev/null)
case $hp_url in https://*-8080.sbx.localhost:$hp_port/) ok "hosted: sbx host gives $hp_url" ;;
  *) bad "hosted: sbx host's answer: $body" ;; esac
hp_host=${hp_url#https://}; hp_host=${hp_host%%/*}

# Private by default.
check "hosted: without the token: 401" 401 "$(hp_status "$hp_url")"
check "hosted: ... on Sandboxer's own page" "Sandboxer · HTTP 401" \
  "$(hp_curl "$hp_url" 2>/dev/null | sed 's/<[^>]*>//g' | grep -o 'Sandboxer · HTTP [0-9]*' | tail -n 1)"
check "hosted: a wrong token: 401" 401 "$(hp_status "${hp_url}?_token=0000")"
hp_redirect=$(hp_curl "$hp_token_url" -D - -o /dev/null 2>/dev/null | tr -d '\r')
check "hosted: ?_token= answers 302" 302 "$(printf '%s\n' "$hp_redirect" | awk 'NR == 1 { print $2 }')"
check "hosted: ... to the clean URL" "location: $hp_url" \
  "$(printf '%s\n' "$hp_redirect" | grep -i '^location:' | sed 's/^[Ll]ocation/location/')"
hp_cookie=$(printf '%s\n' "$hp_redirect" | grep -i '^set-cookie:')
case $hp_cookie in *"__sbx_auth=$hp_token"*HttpOnly*) ;; *) hp_cookie_bad=1 ;; esac
case $hp_cookie in *Secure*) ;; *) hp_cookie_bad=1 ;; esac
[ -z "${hp_cookie_bad:-}" ] && ok "hosted: ... with an HttpOnly Secure __sbx_auth cookie" ||
  bad "hosted: the cookie: '$hp_cookie'"
check "hosted: the cookie jar from the redirect admits (curl -L)" "hello from 8080" \
  "$(hp_curl "$hp_token_url" -L -c "$w/jar" -b "$w/jar" 2>&1)"
check "hosted: ... and later requests with it" "hello from 8080" "$(hp_curl "$hp_url" -b "$w/jar" 2>&1)"
check "hosted: X-Sbx-Auth admits" "hello from 8080" "$(hp_curl "$hp_url" -H "X-Sbx-Auth: $hp_token" 2>&1)"
check "hosted: Authorization: Bearer admits" "hello from 8080" \
  "$(hp_curl "$hp_url" -H "Authorization: Bearer $hp_token" 2>&1)"

# What the app sees.
body=$(hp_curl "${hp_url}headers" -b "$w/jar" -H "X-Sbx-Auth: $hp_token" 2>/dev/null)
check "hosted: the app sees X-Forwarded-Proto https" https "$(py "b.get('x-forwarded-proto')" 2>/dev/null)"
check "hosted: ... X-Forwarded-Host" "$hp_host" "$(py "b.get('x-forwarded-host')" 2>/dev/null)"
check "hosted: ... X-Forwarded-For the client" 127.0.0.1 "$(py "b.get('x-forwarded-for')" 2>/dev/null)"
check "hosted: ... and never the secret" "" "$(printf '%s' "$body" | grep -o "$hp_token" | head -n 1)"

# Keep-alive: the second request of one curl reuses the connection.
check "hosted: keep-alive: one connection for two requests" "1 0" \
  "$(hp_curl "$hp_url" -H "X-Sbx-Auth: $hp_token" -o /dev/null -w '%{num_connects} ' "$hp_url" -H "X-Sbx-Auth: $hp_token" -o /dev/null 2>/dev/null | xargs)"

# SSE: "one" arrives before the stream ends, 3 s later.
hp_sse=$(hp_curl "${hp_url}sse" -N -H "X-Sbx-Auth: $hp_token" 2>/dev/null |
  while read -r line; do [ -n "$line" ] && echo "$(date +%s.%N) $line"; done)
hp_gap=$(printf '%s\n' "$hp_sse" | awk '/data: one/ { a = $1 } /data: two/ { b = $1 } END { gap = (b - a >= 2); print gap }')
check "hosted: an SSE stream's first event comes before its second (3 s apart)" 1 "$hp_gap"
[ "$hp_gap" = 1 ] || echo "hosted: the SSE lines as they came: $hp_sse"

# A 50 MiB upload, streamed.
head -c 50M /dev/urandom >"$w/upload.bin"
body=$(hp_curl "${hp_url}upload" -H "X-Sbx-Auth: $hp_token" --data-binary @"$w/upload.bin" 2>&1)
check "hosted: a 50 MiB upload arrives whole" "52428800 $(sha256sum "$w/upload.bin" | cut -d' ' -f1)" \
  "$(py "'%d %s' % (b['bytes'], b['sha256'])" 2>/dev/null)"
rm -f "$w/upload.bin"

# A WebSocket through the proxy.
check "hosted: a WebSocket echoes through the proxy" "echo: ping-1 echo: ping-2" \
  "$(/usr/bin/python3 "$here/ws_probe.py" "$w/ca.pem" "${hp_host%:*}" "$hp_port" "X-Sbx-Auth: $hp_token" ping-1 ping-2 2>&1 | xargs)"

# --public, --localhost, and a port with nothing on it.
body=$(sbxc --json host "$hp" 8081 --localhost --public 2>/dev/null | tail -n 1)
hp_local_url=$(py "b['hostedPort']['url']" 2>/dev/null)
check "hosted: --public --localhost: the guest's 127.0.0.1:8081 with no token" "hello from 8081" \
  "$(hp_curl "$hp_local_url" 2>&1)"
check "hosted: (control) without --localhost, 8081 is not reached (502)" 502 \
  "$(body=$(sbxc --json host "$hp" 8081 --public 2>/dev/null | tail -n 1); hp_status "$(py "b['hostedPort']['url']")")"
body=$(sbxc --json host "$hp" 9 --public 2>/dev/null | tail -n 1)
hp_none_url=$(py "b['hostedPort']['url']" 2>/dev/null)
check "hosted: nothing listening: 502" 502 "$(hp_status "$hp_none_url")"
check "hosted: ... on Sandboxer's own page" "Sandboxer · HTTP 502" \
  "$(hp_curl "$hp_none_url" 2>/dev/null | sed 's/<[^>]*>//g' | grep -o 'Sandboxer · HTTP [0-9]*' | tail -n 1)"
check "hosted: an unknown host: 404" 404 "$(hp_status "https://nosuch-8080.sbx.localhost:$hp_port/")"
check "hosted: sbx host ls lists the three ports, by port" "9 8080 8081" \
  "$(sbxc --json host ls "$hp" 2>/dev/null | tail -n 1 | /usr/bin/python3 -I -S -c 'import json,sys; print(*[p["port"] for p in json.load(sys.stdin)["hostedPorts"]])')"

# Proxied traffic is activity; a paused sandbox wakes for a request.
hp_pid=$(hp_curl "${hp_url}pid" -H "X-Sbx-Auth: $hp_token" 2>/dev/null)
api GET "/v1/sandboxes/$hp"; hp_active=$(py "b['sandbox']['lastActivityAt']" 2>/dev/null)
# The proxy records activity on its pool, after the answer (and at most once
# a second per connection): requests until the record shows, within a bound.
hp_request_moves_activity() {
  hp_curl "$hp_url" -H "X-Sbx-Auth: $hp_token" -o /dev/null 2>/dev/null
  api GET "/v1/sandboxes/$hp"
  [[ "$(py "b['sandbox']['lastActivityAt']" 2>/dev/null)" > "$hp_active" ]]
}
WAIT_INTERVAL=0.3 wait_until 30 "a proxied request to move lastActivityAt past $hp_active" hp_request_moves_activity &&
  ok "hosted: a proxied request moves lastActivityAt" || bad "hosted: lastActivityAt stayed $hp_active"
api POST "/v1/sandboxes/$hp/idle" '{"idleMinutes":1}'
check "hosted: idle 1 minute (2 s here)" 200 "$code"
hp_state() { api GET "/v1/sandboxes/$hp"; [ "$(py "b['sandbox']['state']" 2>/dev/null)" = "$1" ]; }
WAIT_INTERVAL=0.5 wait_until 180 "the idle pause of $hp" hp_state paused
check "hosted: the sandbox is paused" 0 "$?"
hp_paused_at=$(last_event)
t=$(now)
check "hosted: a request to the paused sandbox is answered by the same process" "$hp_pid" \
  "$(hp_curl "${hp_url}pid" -H "X-Sbx-Auth: $hp_token" 2>&1)"
echo "SBXD-TIME: hosted wake and answer $(elapsed "$t") s"
# Its events, not its state now: with the 2 s minute, a new idle pause may
# already have begun once the connection closed.
check "hosted: ... woken by the request, and it runs again" "paused>creating:wake creating>running" \
  "$(state_changes "$hp" "$hp_paused_at" | cut -d' ' -f1-2)"
# Off (0) before what follows: with the 2 s minute a pause could start
# again and the delete below find the sandbox stopping (409). A null
# idleMinutes is an absent field, not "off".
api POST "/v1/sandboxes/$hp/idle" '{"idleMinutes":0}'
check "hosted: idle pause off again" 200 "$code"
# A pause may have begun before that (the minute is 2 s here, and the
# wake's own resume takes longer): wait it out, as browser.sh does.
hp_settled() { api GET "/v1/sandboxes/$hp"; case $(py "b['sandbox']['state']" 2>/dev/null) in running | paused) ;; *) false ;; esac; }
WAIT_INTERVAL=0.5 wait_until 180 "$hp to be running or paused" hp_settled

# URLs die with unhost and with the sandbox.
sbxc unhost "$hp" 8081 >/dev/null 2>&1
check "hosted: after sbx unhost: 404" 404 "$(hp_status "$hp_local_url")"
api DELETE "/v1/sandboxes/$hp"
check "hosted: delete" 200 "$code"
check "hosted: after sbx rm the URL is 404" 404 "$(hp_status "$hp_url" -H "X-Sbx-Auth: $hp_token")"

kill "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
start_sbxd

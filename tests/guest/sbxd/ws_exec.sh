# sbxd part "ws_exec" (sourced by session.sh, sbxd running): exec over a
# WebSocket (GET /v1/sandboxes/{id}/exec/ws, docs/api.md) with
# sbxd_ws_client and sbx. Stdin round-trips byte for byte (a blob with
# NULs, md5 equal), tty gives a pty whose size is the request's and
# follows a resize, the exit code comes back (sbx exits with it), a first
# message that is not JSON is close 1007, an unknown sandbox close 4404.
# shellcheck shell=bash

ws_client=${SBXD_WS_CLIENT:-$(dirname "$sbxd")/sbxd_ws_client}
# wsx ARGS: the client on sbxd's socket, bounded; its summary line.
wsx() { timeout 600 "$ws_client" --unix "$sock" "$@"; }
# wsf FIELD_EXPR: a field of the summary in $ws_out, as Python sees it.
wsf() { printf '%s' "$ws_out" | /usr/bin/python3 -c "import json,sys; b=json.load(sys.stdin); print($1)" 2>&1; }

if [ ! -x "$ws_client" ]; then
  bad "ws_exec: no $ws_client (build it first)"
else
  api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true}'
  check "ws_exec: create answers 201" 201 "$code"
  wx=$(py "b['sandbox']['id']" 2>/dev/null)
  ws_path=/v1/sandboxes/$wx/exec/ws

  # 1. stdin round trip: cat echoes 1 MiB of random bytes and NULs.
  head -c 1048576 /dev/urandom >"$w/ws_blob"
  printf 'a\0\0b\0' >>"$w/ws_blob"
  ws_out=$(wsx --out "$w/ws_back" "$ws_path" '{"command":["cat"]}' "file:$w/ws_blob" eof)
  check "ws_exec: cat exits 0" 0 "$(wsf 'b["exit"]["exitCode"]')"
  check "ws_exec: close 1000 after the exit" 1000 "$(wsf 'b["close"]["code"]')"
  check "ws_exec: stdin comes back byte for byte" "$(md5sum <"$w/ws_blob")" "$(md5sum <"$w/ws_back")"
  # shellcheck disable=SC2002 # a pipe, not a file: sbx streams it
  check "ws_exec: sbx streams piped stdin too" "$(md5sum <"$w/ws_blob")" \
    "$(cat "$w/ws_blob" | timeout 600 env SBX_HOST="unix:$sock" "$sbx" exec "$wx" -- cat | md5sum)"

  # 2. tty: a pty of the request's size, then a resize. The input waits
  # for the whole first line: the line discipline may echo it between
  # "33 101" and the "\r\n" that ends that line.
  ws_out=$(wsx --out "$w/ws_tty" "$ws_path" \
    '{"shell":"tty; stty size; read x; stty size; exit 7","tty":{"rows":33,"cols":101}}' \
    $'wait:33 101\r\n' 'text:{"type":"resize","rows":50,"cols":132}' 'bytes:go
')
  check "ws_exec: the exit code comes back" 7 "$(wsf 'b["exit"]["exitCode"]')"
  ws_tty=$(tr -d '\r' <"$w/ws_tty")
  check "ws_exec: tty prints /dev/pts/N" 1 "$(printf '%s\n' "$ws_tty" | grep -c '^/dev/pts/[0-9][0-9]*$')"
  sizes=$(printf '%s\n' "$ws_tty" | grep -E '^[0-9]+ [0-9]+$' | paste -sd,)
  check "ws_exec: stty size is the request's, then the resize's" "33 101,50 132" "$sizes"
  # what the pty printed, byte for byte, when that failed
  [ "$sizes" = "33 101,50 132" ] || od -An -c "$w/ws_tty" | head -n 12 | sed 's/^/SBXD-DIAG: ws_exec pty: /' >&2

  # 3. sbx: the command's exit code; --tty on a terminal (script(1)).
  rc=0; echo in | timeout 600 env SBX_HOST="unix:$sock" "$sbx" exec "$wx" -- sh -c 'cat >/dev/null; exit 5' || rc=$?
  check "ws_exec: sbx exits with the command's code" 5 "$rc"
  if command -v script >/dev/null; then
    rc=0
    timeout 600 script -qec \
      "stty rows 30 cols 90; SBX_HOST=unix:$sock $sbx exec --tty $wx -- sh -c 'tty; stty size; exit 3'" \
      /dev/null >"$w/ws_script" || rc=$?
    ws_script=$(tr -d '\r' <"$w/ws_script")
    check "ws_exec: sbx exec --tty exits with the command's code" 3 "$rc"
    check "ws_exec: sbx exec --tty has a pty of the terminal's size" "30 90" \
      "$(printf '%s\n' "$ws_script" | grep -E '^[0-9]+ [0-9]+$' | head -n 1)"
  else
    ok "ws_exec: no script(1) on level 1; sbx --tty not checked"
  fi

  # 4. Errors: not JSON is 1007, an unknown sandbox 4404.
  ws_out=$(wsx "$ws_path" '{"command":')
  check "ws_exec: a first message that is not JSON closes 1007" 1007 "$(wsf 'b["close"]["code"]')"
  ws_out=$(wsx /v1/sandboxes/sbx_nonexistent/exec/ws '{"command":["true"]}')
  check "ws_exec: an unknown sandbox closes 4404" "4404 not_found" \
    "$(wsf 'b["close"]["code"], b["error"]["code"]' | tr -d "(),'")"

  api DELETE "/v1/sandboxes/$wx"
  check "ws_exec: delete $wx" 200 "$code"
  rm -f "$w/ws_blob" "$w/ws_back" "$w/ws_tty" "$w/ws_script"
fi

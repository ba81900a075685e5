# sbxd part "crash" (sourced by session.sh, sbxd running): kill -9 at
# seeded random points inside create, stop, resume, fork, delete, exec, a
# file upload and a named snapshot, of sbxd (then restarted) or, for kind
# "vmm", of the sandbox's VMM under a live sbxd during an exec, stop, fork
# or snapshot. After every kill the restart rules of docs/sbxd.md
# ("Restart") are checked: no sandbox left creating, stopping or deleting;
# every running sandbox's VMM alive and its agent answering (so not left
# paused); no VMM that no sandbox owns; a folder with a whole qcow2 disk
# for every sandbox and a sandbox for every folder; no layer that no
# folder lists, no listed layer missing; no cgroup but the running
# sandboxes', no tap or egress-table element of a sandbox that is gone; an
# upload that completed is there whole, one cut short left the old file
# or the whole new one; a snapshot that was answered 201 is listed, and
# every listed snapshot restores.
# SBX_CRASH_KILLS (default 9: each kind once) and SBX_CRASH_SEED
# (default 12: the kills' delays) choose the run; SBX_CRASH_RANDOM=1 picks
# the kinds at random too. scripts/soak-sbxd runs 100 and more.
# shellcheck shell=bash

cr_kills=${SBX_CRASH_KILLS:-9}
RANDOM=${SBX_CRASH_SEED:-12}
echo "SBXD-CRASH: $cr_kills kills, seed ${SBX_CRASH_SEED:-12}"

# cr_ids STATE...: the sandboxes in those states.
cr_ids() {
  api GET /v1/sandboxes
  py "' '.join(s['id'] for s in b['sandboxes'] if s['state'] in '$*'.split())" 2>/dev/null
}
cr_one() { local a=("$@"); [ $# -gt 0 ] && echo "${a[RANDOM % $#]}"; }

cr_create='{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"crash"}}'
# The upload kind's file (4 MiB, in level 1's tmpfs) and what the guest
# file holds before each upload.
cr_upload=$w/crash-upload.bin cr_upload_path=/root/crash-upload
head -c 4194304 /dev/urandom >"$cr_upload"
cr_new_md5=$(md5sum <"$cr_upload" | cut -d' ' -f1)
cr_old_md5=$(printf 'old\n' | md5sum | cut -d' ' -f1)
# cr_untimed METHOD PATH [BODY]: a step that sets up the next kill; not killed.
cr_untimed() {
  api "$@"
  case $code in 200 | 201) ;; *) bad "setting up ($1 $2): $code $(printf %s "$body" | head -c 300)" ;; esac
}

# cr_pick OP: gets the sandboxes ready for OP (a running one for stop,
# fork and delete, a stopped or crashed one for resume, room for one more
# for create and fork), then sets its request ($cr_method $cr_path
# $cr_body) and how long into it the kill may come ($cr_max_ms).
cr_pick() {
  local op=$1 running stopped all
  read -ra all <<<"$(cr_ids running stopped paused crashed)"
  if [ "$op" = create ] || [ "$op" = fork ]; then
    [ ${#all[@]} -ge 3 ] && cr_untimed DELETE "/v1/sandboxes/${all[0]}"
  fi
  read -ra running <<<"$(cr_ids running)"
  if [ "$op" != create ] && [ ${#running[@]} -eq 0 ]; then
    cr_untimed POST /v1/sandboxes "$cr_create"
    read -ra running <<<"$(cr_ids running)"
  fi
  read -ra stopped <<<"$(cr_ids stopped paused crashed)"
  if [ "$op" = resume ] && [ ${#stopped[@]} -eq 0 ] && [ ${#running[@]} -gt 0 ]; then
    cr_untimed POST "/v1/sandboxes/${running[0]}/stop" '{}'
    read -ra stopped <<<"$(cr_ids stopped paused crashed)"
  fi
  cr_method=POST cr_body='{}' cr_max_ms=4000 cr_target=$(cr_one "${running[@]}") cr_file=
  case $op in
    create) cr_path=/v1/sandboxes cr_body=$cr_create cr_max_ms=6000 ;;
    stop) cr_path=/v1/sandboxes/$cr_target/stop ;;
    fork) cr_path=/v1/sandboxes/$cr_target/fork cr_body='{"count":1}' cr_max_ms=12000 ;;
    resume) cr_target=$(cr_one "${stopped[@]}") cr_path=/v1/sandboxes/$cr_target/resume ;;
    delete) cr_method=DELETE cr_path=/v1/sandboxes/$cr_target cr_max_ms=1500 ;;
    exec) cr_path=/v1/sandboxes/$cr_target/exec cr_body='{"shell":"sleep 1; echo done"}' cr_max_ms=3000 ;;
    upload)
      printf 'old\n' >"$w/crash-old"
      cr_untimed_put "$cr_target" "$w/crash-old"
      cr_method=PUT cr_path="/v1/sandboxes/$cr_target/files?path=$cr_upload_path" cr_file=$cr_upload cr_max_ms=3000 ;;
    snapshot) cr_path=/v1/sandboxes/$cr_target/snapshot cr_body="{\"name\":\"crash-$cr_i\"}" cr_max_ms=8000 ;;
  esac
}

# cr_untimed_put ID FILE: the guest's $cr_upload_path becomes FILE.
cr_untimed_put() {
  local got
  got=$(curl -sS --unix-socket "$sock" -X PUT "http://sbxd/v1/sandboxes/$1/files?path=$cr_upload_path" \
    -T "$2" -o /dev/null -w '%{http_code}' --max-time 300 2>&1)
  [ "$got" = 200 ] || bad "setting up (upload to $1): $got"
}

# cr_request: the picked request in the background; its HTTP status goes
# to $w/crash-status (000 when it was cut short).
cr_request() {
  rm -f "$w/crash-status"
  if [ -n "$cr_file" ]; then
    curl -sS --unix-socket "$sock" -X "$cr_method" "http://sbxd$cr_path" -T "$cr_file" \
      -o /dev/null -w '%{http_code}' --max-time 600 >"$w/crash-status" 2>/dev/null &
  else
    curl -sS --unix-socket "$sock" -X "$cr_method" "http://sbxd$cr_path" -H 'Content-Type: application/json' \
      --data "$cr_body" -o /dev/null -w '%{http_code}' --max-time 600 >"$w/crash-status" 2>/dev/null &
  fi
  cr_curl=$!
}

# cr_vmm_pick: for kind "vmm", a request on a running sandbox whose VMM
# the kill then hits: an exec, a stop, a fork or a snapshot.
cr_vmm_pick() {
  cr_pick "$(cr_one exec stop fork snapshot)"
  cr_vmm_pid=$(vmm_field "$cr_target" pid 2>/dev/null)
}

# cr_settled: no sandbox in a state that an operation is still under way
# in, and none running whose VMM has ended (the watcher has seen it).
cr_settled() {
  local r
  api GET /v1/sandboxes
  [ "$(py "sum(1 for s in b['sandboxes'] if s['state'] in ('creating','stopping','deleting'))" 2>/dev/null)" = 0 ] ||
    return 1
  for r in $(py "' '.join(s['id'] for s in b['sandboxes'] if s['state'] == 'running')" 2>/dev/null); do
    kill -0 "$(vmm_field "$r" pid 2>/dev/null)" 2>/dev/null || return 1
  done
}

# cr_after LABEL OP: what the request itself left, once sbxd is back.
cr_after() {
  local label=$1 op=$2 status md5 snap
  status=$(cat "$w/crash-status" 2>/dev/null)
  if [ "$op" = upload ]; then
    md5=$(agent "$cr_target" exec -- md5sum "$cr_upload_path" 2>/dev/null | cut -d' ' -f1)
    if [ "$status" = 200 ]; then
      check "$label: the completed upload is there whole" "$cr_new_md5" "$md5"
    elif [ "$md5" = "$cr_new_md5" ] || [ "$md5" = "$cr_old_md5" ]; then
      ok "$label: the cut upload (status ${status:-none}) left the old file or the whole new one"
    else
      api GET "/v1/sandboxes/$cr_target"
      # A VMM killed under it: the sandbox is crashed and its file unread.
      if [ "$(py "b['sandbox']['state']" 2>/dev/null)" = running ]; then
        bad "$label: the cut upload (status ${status:-none}) left '$md5'"
      else
        ok "$label: the upload's sandbox is no longer running"
      fi
    fi
  fi
  if [ "$op" = snapshot ] && [ "$status" = 201 ]; then
    api GET "/v1/snapshots/crash-$cr_i"
    check "$label: the answered snapshot is listed" 200 "$code"
  fi
  # Every snapshot there restores, and then goes (they hold layers).
  local snaps held
  api GET /v1/snapshots
  snaps=$(py "' '.join(s['name'] for s in b['snapshots'] if s['name'].startswith('crash-'))" 2>/dev/null)
  # Room for the restore first: three 1 GiB sandboxes holding memory fill
  # level 1's budget, and sbxd rightly answers a fourth 503
  # capacity_exceeded (seen in a 100-kill soak).
  if [ -n "$snaps" ]; then
    read -ra held <<<"$(cr_ids running paused)"
    [ ${#held[@]} -lt 3 ] || cr_untimed DELETE "/v1/sandboxes/${held[0]}"
  fi
  for snap in $snaps; do
    api POST /v1/sandboxes "{\"from\":\"$snap\",\"noAutoStop\":true,\"labels\":{\"test\":\"crash\"}}"
    if check "$label: a create from snapshot $snap answers 201" 201 "$code"; then
      local child
      child=$(py "b['sandbox']['id']" 2>/dev/null)
      check "$label: the sandbox from $snap answers" "up $child" "$(agent "$child" exec -- echo up "$child" 2>&1)"
      api DELETE "/v1/sandboxes/$child"
      check "$label: delete of the sandbox from $snap" 200 "$code"
    fi
    api DELETE "/v1/snapshots/$snap"
    check "$label: delete of snapshot $snap" 200 "$code"
  done
}

# cr_listed_layers: every layer the sandbox and snapshot folders list, one
# per line.
cr_listed_layers() { cat "$state"/sandboxes/*/layers.txt "$state"/snapshots/*/layers.txt 2>/dev/null | sort -u; }
# cr_links: the host's sandbox taps ("sbx" and a slot number), sorted.
cr_links() { ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(sbx[0-9][0-9]*\)[:@].*/\1/p' | sort | xargs; }
# cr_nft_taps: the interfaces that the egress table's set elements name.
cr_nft_taps() {
  nft -j list table inet sbxd 2>/dev/null | /usr/bin/python3 -c '
import json, sys
names = set()
def walk(e):
    if isinstance(e, str) and e.startswith("sbx"): names.add(e)
    elif isinstance(e, dict): [walk(v) for v in e.values()]
    elif isinstance(e, list): [walk(v) for v in e]
for o in json.load(sys.stdin)["nftables"]:
    if "set" in o: walk(o["set"].get("elem", []))
print(" ".join(sorted(names)))'
}

# cr_vmm_op ID OP: pause or resume sandbox ID's VMM through its control
# socket when the sandbox is running (sbxd's state is not involved; a
# crashed one's socket may be left behind, with no VMM).
cr_vmm_op() {
  local sock=$state/sandboxes/$1/vmm/control.sock
  case " $running " in *" $1 "*) ;; *) return 0 ;; esac
  timeout 30 /usr/bin/python3 "$vmm_control" "$sock" "{\"op\":\"$2\"}" >/dev/null 2>&1 ||
    bad "$2 of $1's VMM through its control socket"
}

# cr_check LABEL: the restart rules, after a restart.
cr_check() {
  local label=$1 rows folders running want got r layers listed
  api GET /v1/sandboxes
  check "$label: no sandbox half-way" "" \
    "$(py "' '.join(s['id']+':'+s['state'] for s in b['sandboxes'] if s['state'] not in ('running','stopped','paused','crashed'))" 2>/dev/null)"
  rows=$(py "' '.join(sorted(s['id'] for s in b['sandboxes']))" 2>/dev/null)
  folders=$(ls "$state/sandboxes" 2>/dev/null | sort | xargs)
  check "$label: a folder for every sandbox, a sandbox for every folder" "$rows" "$folders"
  running=$(py "' '.join(s['id'] for s in b['sandboxes'] if s['state'] == 'running')" 2>/dev/null)
  want=$(for r in $running; do vmm_field "$r" pid; done | sort -n | xargs)
  # A warm template's build (--snapshot-dir under templates/) is sbxd's
  # own, not a sandbox's: a kill can leave the first one unbuilt.
  got=$(pgrep -f -- "--snapshot-dir $state/sandboxes/" | sort -n | xargs)
  check "$label: the VMMs are exactly the running sandboxes' VMMs" "$want" "$got"
  for r in $running; do
    check "$label: running $r answers" "up $r" "$(agent "$r" exec -- echo up "$r" 2>&1)"
  done
  for r in $rows; do
    check "$label: $r has its qcow2 disk" QFI "$(head -c 3 "$state/sandboxes/$r/disk.qcow2" 2>/dev/null)"
    if command -v qemu-img >/dev/null; then
      # A running VMM's image is checked paused (its devices quiesced):
      # between a cluster's refcount and its L2 entry, a live image is
      # briefly "leaked". What qemu-img found (exit 2: corruption, 3:
      # leaked clusters only) is kept with a failure.
      cr_vmm_op "$r" pause
      if cr_qcheck=$(qemu-img check -U "$state/sandboxes/$r/disk.qcow2" 2>&1); then
        ok "$label: $r's disk checks clean"
      else
        bad "$label: qemu-img check of $r's disk (status $?): $(printf '%s' "$cr_qcheck" | tail -n 6 | tr '\n' ' ')"
      fi
      cr_vmm_op "$r" resume
    fi
  done
  layers=$(ls -d "$state"/layers/* 2>/dev/null | sort | xargs)
  listed=$(cr_listed_layers | xargs)
  check "$label: the layers are exactly those the folders list" "$listed" "$layers"
  if [ -d "$cgroups" ]; then
    check "$label: the cgroups are exactly the running sandboxes'" "$(printf '%s\n' $running | sort | xargs)" \
      "$(ls "$cgroups" 2>/dev/null | grep '^sbx_' | sort | xargs)"
  fi
  # Taps and elements live as long as their sandbox (docs/network.md).
  api GET /v1/sandboxes
  local taps stray
  taps=" $(py "' '.join(s['network']['interface'] for s in b['sandboxes'] if s.get('network'))" 2>/dev/null) "
  stray=$(for t in $(cr_links) $(cr_nft_taps); do case $taps in *" $t "*) ;; *) echo "$t" ;; esac; done | sort -u | xargs)
  check "$label: no tap or egress element of a sandbox that is gone" "" "$stray"
}

# Each kind in turn (every kind killed at least once in a short run),
# unless SBX_CRASH_RANDOM=1 picks each at random.
cr_kinds=(create stop resume fork delete exec upload snapshot vmm)
cr_ops=
for cr_i in $(seq "$cr_kills"); do
  if [ "${SBX_CRASH_RANDOM:-0}" = 1 ]; then cr_kind=$(cr_one "${cr_kinds[@]}"); else
    cr_kind=${cr_kinds[$(((cr_i - 1) % ${#cr_kinds[@]}))]}; fi
  if [ "$cr_kind" = vmm ]; then cr_vmm_pick; cr_op=${cr_path##*/}; cr_op=${cr_op%%\?*}; else
    cr_pick "$cr_kind"; cr_op=$cr_kind; fi
  [ "$cr_kind" = vmm ] && [ "$cr_op" = files ] && cr_op=upload
  cr_ms=$((RANDOM % cr_max_ms))
  cr_ops="$cr_ops $cr_kind:$cr_op@${cr_ms}ms"
  cr_request
  sleep "$(awk -v ms="$cr_ms" 'BEGIN { print ms / 1000 }')"
  if [ "$cr_kind" = vmm ]; then
    cr_label="kill $cr_i (VMM $cr_vmm_pid of $cr_target in $cr_method $cr_path at ${cr_ms} ms)"
    kill -9 "$cr_vmm_pid" 2>/dev/null
    wait "$cr_curl" 2>/dev/null
    wait_until 120 "no operation under way after the VMM's kill" cr_settled ||
      bad "$cr_label: a sandbox still half-way"
  else
    cr_label="kill $cr_i ($cr_method $cr_path at ${cr_ms} ms)"
    kill -9 "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
    wait "$cr_curl" 2>/dev/null
    start_sbxd
  fi
  cr_check "$cr_label"
  cr_after "$cr_label" "$cr_op"
done
echo "SBXD-CRASH-OPS:$cr_ops"

# Nothing left: every sandbox deleted, no VMM, folder or layer.
for cr_s in $(cr_ids running stopped paused crashed); do
  api DELETE "/v1/sandboxes/$cr_s"
  check "crash part: delete $cr_s" 200 "$code"
done
check "crash part: no VMM left" 0 "$(vmm_count)"
check "crash part: no sandbox folder left" 0 "$(ls "$state/sandboxes" | grep -c .)"
check "crash part: no layer left" 0 "$(ls "$state/layers" 2>/dev/null | grep -c .)"
check "crash part: no tap or egress element left" "" "$(echo $(cr_links) $(cr_nft_taps))" || true


# sbxd part "crash" (sourced by session.sh, sbxd running): kill -9 of sbxd
# at seeded random points inside create, stop, resume, fork and delete, a
# restart after each, and the restart rules of docs/sbxd.md ("Restart")
# checked every time: no sandbox left creating, stopping or deleting;
# every running sandbox's VMM alive and its agent answering (so not left
# paused); no VMM that no sandbox owns; a folder with a whole qcow2 disk
# for every sandbox and a sandbox for every folder; no layer that no
# folder lists, no listed layer missing.
# SBX_CRASH_KILLS (default 5: each operation once) and SBX_CRASH_SEED
# (default 12: the kills' delays) choose the run; SBX_CRASH_RANDOM=1 picks
# the operations at random too. scripts/soak-sbxd runs 30 and more.
# shellcheck shell=bash

cr_kills=${SBX_CRASH_KILLS:-5}
RANDOM=${SBX_CRASH_SEED:-12}
echo "SBXD-CRASH: $cr_kills kills, seed ${SBX_CRASH_SEED:-12}"

# cr_ids STATE...: the sandboxes in those states.
cr_ids() {
  api GET /v1/sandboxes
  py "' '.join(s['id'] for s in b['sandboxes'] if s['state'] in '$*'.split())" 2>/dev/null
}
cr_one() { local a=("$@"); [ $# -gt 0 ] && echo "${a[RANDOM % $#]}"; }

cr_create='{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"crash"}}'
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
  cr_method=POST cr_body='{}' cr_max_ms=4000
  case $op in
    create) cr_path=/v1/sandboxes cr_body=$cr_create cr_max_ms=6000 ;;
    stop) cr_path=/v1/sandboxes/$(cr_one "${running[@]}")/stop ;;
    fork) cr_path=/v1/sandboxes/$(cr_one "${running[@]}")/fork cr_body='{"count":1}' cr_max_ms=12000 ;;
    resume) cr_path=/v1/sandboxes/$(cr_one "${stopped[@]}")/resume ;;
    delete) cr_method=DELETE cr_path=/v1/sandboxes/$(cr_one "${running[@]}") cr_max_ms=1500 ;;
  esac
}

# cr_layers: every layer the sandbox folders list, one per line.
cr_listed_layers() { cat "$state"/sandboxes/*/layers.txt 2>/dev/null | sort -u; }

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
  got=$(pgrep -f -- "--snapshot-dir $state/" | sort -n | xargs)
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
}

# Each operation in turn (every kind killed at least once in a short run),
# unless SBX_CRASH_RANDOM=1 picks each at random.
cr_kinds=(create stop resume fork delete)
cr_ops=
for cr_i in $(seq "$cr_kills"); do
  if [ "${SBX_CRASH_RANDOM:-0}" = 1 ]; then cr_op=$(cr_one "${cr_kinds[@]}"); else
    cr_op=${cr_kinds[$(((cr_i - 1) % ${#cr_kinds[@]}))]}; fi
  cr_pick "$cr_op"
  cr_ms=$((RANDOM % cr_max_ms))
  cr_ops="$cr_ops $cr_op@${cr_ms}ms"
  curl -sS --unix-socket "$sock" -X "$cr_method" "http://sbxd$cr_path" -H 'Content-Type: application/json' \
    --data "$cr_body" --max-time 600 >/dev/null 2>&1 &
  cr_curl=$!
  sleep "$(awk -v ms="$cr_ms" 'BEGIN { print ms / 1000 }')"
  kill -9 "$sbxd_pid"; wait "$sbxd_pid" 2>/dev/null
  wait "$cr_curl" 2>/dev/null
  start_sbxd
  cr_check "kill $cr_i ($cr_op $cr_path at ${cr_ms} ms)"
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

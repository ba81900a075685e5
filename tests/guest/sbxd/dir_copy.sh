# sbxd part "dir_copy" (sourced by session.sh, sbxd running): directories
# both ways as tar and the guest console log, on one sandbox. A local tree
# (nested directories, a few MiB of random bytes, an empty file and an
# empty directory, symlinks, a name with a space) goes in with sbx scp -r
# and is checked inside with sha256sum; it comes back out with sbx scp -r
# to a new directory and matches with diff -r; GET …/files/tar lists the
# expected names (tar -t). The console: a line the guest writes to
# /dev/console shows in GET …/logs and sbx logs, tail=N gives N bytes
# with Sandbox-Log-Offset = size - N, an unknown sandbox is 404 not_found.
# The kernel's own "Linux version" line is not looked for: sbxd boots with
# `quiet` (below KERN_WARNING stays off the console) and a sandbox from
# the warm template starts its log at the restore. Deletes the sandbox.
# shellcheck shell=bash
# session.sh and lib.sh set w, sock, code and body, and py reads body:
# shellcheck disable=SC2154,SC2034

dc_src=$w/dc-src dc_back=$w/dc-back
rm -rf "$dc_src" "$dc_back"
mkdir -p "$dc_src/proj/src/deep/er" "$dc_src/proj/empty-dir"
head -c $((3 * 1024 * 1024 + 4321)) /dev/urandom >"$dc_src/proj/blob.bin"
printf 'print("hello")\n' >"$dc_src/proj/src/main.py"
printf 'deep\n' >"$dc_src/proj/src/deep/er/note.txt"
printf 'spaced\n' >"$dc_src/proj/a name.txt"
: >"$dc_src/proj/empty"
chmod 0750 "$dc_src/proj/src"
ln -s src/main.py "$dc_src/proj/run"
ln -s ../main.py "$dc_src/proj/src/deep/up"
# What both sides must show: every file's sha256, every directory, every
# link (a script for sh -c, run here and in the guest: $1 is the root).
# shellcheck disable=SC2016
dc_manifest='export LC_ALL=C; cd "$1" && find . -type f -exec sha256sum {} + | sort -k2 && find . -type d | sort && find . -type l -exec sh -c '"'"'for l; do echo "$l -> $(readlink "$l")"; done'"'"' sh {} + | sort'
dc_local=$(sh -c "$dc_manifest" sh "$dc_src/proj")

api POST /v1/sandboxes '{"cpus":1,"memoryMib":1024,"noAutoStop":true,"labels":{"test":"dir_copy"}}'
check "dir_copy: create answers 201" 201 "$code"
dc=$(py "b['sandbox']['id']" 2>/dev/null)

t=$(now)
dc_up=$(sbxc scp -r "$dc_src/proj" "$dc:/root/dc" 2>&1 | tail -n 1)
body=$dc_up
check "dir_copy: sbx scp -r into the sandbox" "copied $dc:/root/dc 11" \
  "$(py "b['type'] + ' ' + b['to'] + ' ' + str(b['entries'])" 2>/dev/null || printf '%s' "$dc_up")"
echo "SBXD-TIME: dir_copy upload $(elapsed "$t") s"
check "dir_copy: inside, the same files, directories and links (sha256sum)" "$dc_local" \
  "$(sbxc exec "$dc" -n -- sh -c "$dc_manifest" sh /root/dc 2>&1)"
check "dir_copy: inside, a directory keeps its mode" 750 "$(sbxc exec "$dc" -n -- stat -c %a /root/dc/src 2>&1)"

t=$(now)
dc_down=$(sbxc scp -r "$dc:/root/dc" "$dc_back" 2>&1 | tail -n 1)
body=$dc_down
check "dir_copy: sbx scp -r out of the sandbox" "copied $dc_back 11" \
  "$(py "b['type'] + ' ' + b['to'] + ' ' + str(b['entries'])" 2>/dev/null || printf '%s' "$dc_down")"
echo "SBXD-TIME: dir_copy download $(elapsed "$t") s"
check "dir_copy: back out, diff -r finds nothing" "" "$(diff -r "$dc_src/proj" "$dc_back" 2>&1)"
check "dir_copy: back out, the same sha256sums and links" "$dc_local" "$(sh -c "$dc_manifest" sh "$dc_back")"
check "dir_copy: no partial directory is left" 0 "$(find "$w" -maxdepth 1 -name 'dc-back.sbx-partial-*' | grep -c .)"

dc_names=$(curl -sS --unix-socket "$sock" --max-time 900 "http://sbxd/v1/sandboxes/$dc/files/tar?path=/root/dc" |
  tar -tf - 2>&1 | sort | tr '\n' ' ')
check "dir_copy: GET files/tar lists the tree" \
  "a name.txt blob.bin empty empty-dir/ run src/ src/deep/ src/deep/er/ src/deep/er/note.txt src/deep/up src/main.py " \
  "$dc_names"
api GET "/v1/sandboxes/$dc/files/tar?path=/root/nothing-here"
check "dir_copy: GET files/tar of a missing path is 404" "404 not_found" "$code $(py "b['code']" 2>/dev/null)"

# The console log.
dc_mark="sbx-dir-copy-console-$dc"
sbxc exec "$dc" -n -- sh -c "echo $dc_mark >/dev/console" >/dev/null 2>&1
dc_logged() { curl -sS --unix-socket "$sock" --max-time 300 "http://sbxd/v1/sandboxes/$dc/logs" | grep -q "$dc_mark"; }
wait_until 120 "the marker in the console log" dc_logged
check "dir_copy: GET logs has what the guest wrote to /dev/console" 0 "$?"
check "dir_copy: sbx logs has it too" 1 "$(sbxc logs "$dc" 2>/dev/null | grep -c "$dc_mark")"
check "dir_copy: sbx logs --tail has it at the end" "$dc_mark" "$(sbxc logs "$dc" --tail 4K 2>/dev/null | tr -d '\r' | grep "$dc_mark" | tail -n 1)"
dc_tail=$(curl -sS --unix-socket "$sock" --max-time 300 -D "$w/dc-logs.h" "http://sbxd/v1/sandboxes/$dc/logs?tail=20" | wc -c)
dc_size=$(tr -d '\r' <"$w/dc-logs.h" | sed -n 's/^[Ss]andbox-[Ll]og-[Ss]ize: //p')
dc_offset=$(tr -d '\r' <"$w/dc-logs.h" | sed -n 's/^[Ss]andbox-[Ll]og-[Oo]ffset: //p')
check "dir_copy: tail=20 gives 20 bytes" 20 "$dc_tail"
check "dir_copy: tail=20 starts at size - 20" "$((dc_size - 20))" "$dc_offset"
api GET "/v1/sandboxes/$dc/logs?tail=1&offset=1"
check "dir_copy: tail with offset is 400" "400 invalid_argument" "$code $(py "b['code']" 2>/dev/null)"
api GET "/v1/sandboxes/sbx_0000000000000000/logs"
check "dir_copy: the log of an unknown sandbox is 404" "404 not_found" "$code $(py "b['code']" 2>/dev/null)"

api DELETE "/v1/sandboxes/$dc"
check "dir_copy: delete" 200 "$code"
rm -rf "$dc_src" "$dc_back" "$w/dc-logs.h"

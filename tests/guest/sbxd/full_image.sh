# sbxd part "full_image" (sourced by session.sh, sbxd running; needs the
# full image, sbxd's image `default`: tests/guest/sbxd.sh links it in for
# the `full` group): a sandbox of the default image people work in
# (images/README.md, "Default image"; issue 16):
#  1. exec runs as `user`, who has passwordless sudo;
#  2. every tool the image lists says its version, and the image's own
#     checks pass (tests/guest/full_tools.sh: a venv with pip, Chromium
#     headless rendering a page, the Docker daemon answering);
#  3. Docker: `docker build` of an image FROM scratch from a local context
#     (tests/guest/tools/sbx-web, static: there is no registry to pull
#     from), `docker run` with a published port answering curl,
#     `docker-compose up` of two services where one fetches from the other;
#  4. a container started with `--restart unless-stopped` runs on, the same
#     process, after stop with memory + resume, and is back after a stop
#     without memory + resume (a cold boot);
# then delete. The sandbox is created with `cold` (no warm template of the
# 3.6 GiB image is built beside it).
# shellcheck shell=bash

fi_exec() { sbxc exec "$fi" --timeout "${FI_TIMEOUT:-10m}" -- "$@"; }
# fi_curl PORT: the guest's own curl to a published port.
fi_curl() { fi_exec curl -sS --max-time 20 "http://127.0.0.1:$1/" 2>&1; }
fi_answers() { [ "$(fi_curl "$1")" = "$2" ]; }
fi_keep_state() { fi_exec docker inspect -f '{{.State.Running}} {{.State.Pid}}' keep 2>&1; }

t=$(now)
api POST /v1/sandboxes '{"from":"default","cold":true,"cpus":1,"memoryMib":1536,"noAutoStop":true,"labels":{"test":"full_image"}}'
check "full_image: create from the default image answers 201" 201 "$code"
fi=$(py "b['sandbox']['id']" 2>/dev/null)
echo "SBXD-TIME: full_image create (cold) $(elapsed "$t") s"
if [ "$code" != 201 ] || [ -z "$fi" ]; then
  printf '%s\n' "$body" | head -c 2000
  tail -n 30 "$state"/sandboxes/*/console.log 2>/dev/null
else
  # 1. The default exec user.
  check "full_image: exec runs as user" user "$(fi_exec id -un 2>&1)"
  check "full_image: user has passwordless sudo" root "$(fi_exec sudo -n id -un 2>&1)"

  # 2. The image's tools (tests/guest/full_tools.sh prints ok:/FAIL: lines).
  t=$(now)
  sbxc scp "$here/../full_tools.sh" "$fi:/tmp/full_tools.sh" >/dev/null 2>&1
  tools_out=$(FI_TIMEOUT=40m fi_exec bash /tmp/full_tools.sh 900 2>&1)
  tools_rc=$?
  echo "SBXD-TIME: full_image tools $(elapsed "$t") s"
  while IFS= read -r line; do
    case $line in
      ok:\ *) ok "full_image: ${line#ok: }" ;;
      FAIL:\ *) bad "full_image: ${line#FAIL: }" ;;
    esac
  done <<<"$tools_out"
  check "full_image: full_tools.sh exits 0" 0 "$tools_rc" || printf '%s\n' "$tools_out" | tail -n 20

  # 3. Docker, offline: an image FROM scratch with a static server.
  t=$(now)
  fi_exec mkdir -p /tmp/dk
  sbxc scp "$logdir/sbx-web" "$fi:/tmp/dk/sbx-web" >/dev/null 2>&1
  fi_exec chmod 755 /tmp/dk/sbx-web
  printf 'FROM scratch\nCOPY sbx-web /sbx-web\nENTRYPOINT ["/sbx-web"]\n' >"$w/Dockerfile"
  sbxc scp "$w/Dockerfile" "$fi:/tmp/dk/Dockerfile" >/dev/null 2>&1
  build_out=$(FI_TIMEOUT=20m fi_exec docker build -t sbx-web /tmp/dk 2>&1)
  check "full_image: docker build of an image FROM scratch" 0 "$?" || printf '%s\n' "$build_out" | tail -n 20
  run_out=$(fi_exec docker run -d --name web -p 18080:80 sbx-web serve 80 hello-docker 2>&1)
  check "full_image: docker run with a published port" 0 "$?" || printf '%s\n' "$run_out" | tail -n 5
  wait_until 300 "the published port answers" fi_answers 18080 hello-docker
  check "full_image: the published port answers curl" hello-docker "$(fi_curl 18080)"
  # Two services on a network of the test's own: b fetches a's answer
  # from a's fixed address (a scratch image has no resolver).
  cat >"$w/compose.yml" <<'YAML'
version: "2.4"
services:
  a:
    image: sbx-web
    command: ["serve", "80", "from-a"]
    networks: {n: {ipv4_address: 172.28.5.10}}
  b:
    image: sbx-web
    command: ["relay", "80", "172.28.5.10", "80"]
    ports: ["18081:80"]
    networks: {n: {ipv4_address: 172.28.5.11}}
networks:
  n:
    ipam: {config: [{subnet: 172.28.5.0/24}]}
YAML
  sbxc scp "$w/compose.yml" "$fi:/tmp/dk/docker-compose.yml" >/dev/null 2>&1
  up_out=$(fi_exec sh -c 'cd /tmp/dk && docker-compose -p sbxt up -d' 2>&1)
  check "full_image: docker-compose up of two services" 0 "$?" || printf '%s\n' "$up_out" | tail -n 10
  wait_until 300 "compose's b relays a" fi_answers 18081 relay:from-a
  check "full_image: compose's b fetched from a" relay:from-a "$(fi_curl 18081)"
  down_out=$(fi_exec sh -c 'cd /tmp/dk && docker-compose -p sbxt down' 2>&1)
  check "full_image: docker-compose down" 0 "$?" || printf '%s\n' "$down_out" | tail -n 10
  echo "SBXD-TIME: full_image docker $(elapsed "$t") s"

  # 4. A container with a restart policy across stop/resume.
  fi_exec docker run -d --name keep --restart unless-stopped -p 18082:80 sbx-web serve 80 kept >/dev/null 2>&1
  wait_until 300 "the kept container answers" fi_answers 18082 kept
  keep_before=$(fi_keep_state)
  check "full_image: the kept container runs" true "${keep_before%% *}"
  stop_resume full_image "$fi"
  check "full_image: after resume the kept container is the same process" "$keep_before" "$(fi_keep_state)"
  check "full_image: ... and answers" kept "$(fi_curl 18082)"
  stop_resume full_image "$fi" cold
  wait_until 600 "the kept container is back after the boot" fi_answers 18082 kept
  keep_after=$(fi_keep_state)
  check "full_image: after a cold boot the kept container runs again" true "${keep_after%% *}"
  check "full_image: ... as a new process" yes "$([ "${keep_after#* }" != "${keep_before#* }" ] && echo yes)"
  check "full_image: ... and answers" kept "$(fi_curl 18082)"
  check "full_image: a container without a restart policy stays stopped" false \
    "$(fi_exec docker inspect -f '{{.State.Running}}' web 2>&1)"
fi
[ -z "$fi" ] || api DELETE "/v1/sandboxes/$fi"
check "full_image: delete answers 200" 200 "$code"

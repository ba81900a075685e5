#!/usr/bin/env bash
# The hosted-ports proxy on the operator's certificate (docs/sbxd.md,
# "Hosted ports": --proxy-cert, --proxy-key), with the real sbxd, openssl
# and curl. The test is the operator: openssl makes a root CA of its own,
# an intermediate and a leaf for *.sbx.test and sbx.test; sbxd starts with
# the leaf and the intermediate (--proxy-cert) and the leaf's key. Then:
#  - curl --cacert ROOT to a hosted URL (https://<subdomain>-<port>.sbx.test:PORT/)
#    validates the chain sbxd serves and the name; the answer is sbxd's own
#    page (Sandboxer · HTTP 404: no such hosted port, no guest here);
#  - openssl s_client sees the operator's leaf and intermediate;
#  - another CA, the system's trust store, a name outside the wildcard and
#    a name of another domain do not validate;
#  - sbxd issues no certificate of its own: GET /v1/ca is 404, its state
#    directory has no CA;
#  - refused at start (exit 1, listening nowhere, a clear error naming
#    what is wrong): a key of another certificate, a certificate file that
#    does not exist, one sbxd cannot read (as another user), one that is
#    not PEM, an empty key, a certificate without its key.
# Needs no guest (suite unit). Usage: proxy_cert_test.sh BUILD_ROOT
set -euo pipefail
build=$1
sbxd=$build/host-tools/sbxd/sbxd
for c in curl openssl python3; do
    command -v "$c" >/dev/null || { echo "SKIP: no $c"; exit 77; }
done

# shellcheck source=SCRIPTDIR/test_lib.sh
. "$(dirname "$0")/test_lib.sh"
scratch sbxd-proxy-cert
pki=$tmp/pki
mkdir -p "$pki"
domain=sbx.test

# 1. The operator's PKI: root -> intermediate -> leaf (EC P-256), and a
# stranger's CA, and a key that belongs to no certificate here.
ossl() { openssl "$@" 2>>"$tmp/openssl.log" || { cat "$tmp/openssl.log" >&2; echo "openssl $1 failed" >&2; exit 1; }; }
key() { ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$1.key"; }
cat >"$pki/ext.cnf" <<EOF
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:*.$domain, DNS:$domain
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
for k in root inter leaf stranger other; do key "$k"; done
ossl req -x509 -new -key "$pki/root.key" -subj "/CN=Operator Root CA" -days 3 -out "$pki/root.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
ossl req -x509 -new -key "$pki/stranger.key" -subj "/CN=Stranger CA" -days 3 -out "$pki/stranger.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
ossl req -new -key "$pki/inter.key" -subj "/CN=Operator Intermediate CA" -out "$pki/inter.csr"
ossl x509 -req -in "$pki/inter.csr" -CA "$pki/root.pem" -CAkey "$pki/root.key" -CAcreateserial -days 2 \
    -extfile "$pki/ext.cnf" -extensions ca -out "$pki/inter.pem"
ossl req -new -key "$pki/leaf.key" -subj "/CN=*.$domain" -out "$pki/leaf.csr"
ossl x509 -req -in "$pki/leaf.csr" -CA "$pki/inter.pem" -CAkey "$pki/inter.key" -CAcreateserial -days 1 \
    -extfile "$pki/ext.cnf" -extensions leaf -out "$pki/leaf.pem"
cat "$pki/leaf.pem" "$pki/inter.pem" >"$pki/chain.pem"
# (the control: the chain is good as openssl sees it)
openssl verify -CAfile "$pki/root.pem" -untrusted "$pki/inter.pem" "$pki/leaf.pem" >/dev/null ||
    fail "openssl verify: the test's own chain is bad"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sock=$tmp/sbxd.sock
# run_sbxd LOG ARGS...: sbxd in the background (its pid $pid), stderr in
# LOG; no network, hosted ports on $port for $domain, on ARGS' certificate.
run_sbxd() {
    local log=$1
    shift
    "$sbxd" --network off --state-dir "$tmp/state" --images "$tmp/no-images" --listen "unix:$sock" \
        --proxy-listen "tcp:127.0.0.1:$port" --proxy-domain "$domain" "$@" 2>"$log" &
    pid=$!
}

# 2. sbxd on the operator's chain.
run_sbxd "$tmp/sbxd.log" --proxy-cert "$pki/chain.pem" --proxy-key "$pki/leaf.key"
for _ in $(seq 100); do
    grep -q 'listening on unix:' "$tmp/sbxd.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
grep -q 'listening on unix:' "$tmp/sbxd.log" || { cat "$tmp/sbxd.log" >&2; echo "sbxd did not start" >&2; exit 1; }
grep -q "hosted ports at https://<subdomain>-<port>.$domain:$port (the operator's certificate)" "$tmp/sbxd.log" ||
    fail "sbxd does not say it serves the operator's certificate: $(grep 'hosted ports' "$tmp/sbxd.log")"

host=abcde-8080.$domain
url=https://$host:$port/
# hosted NAME HOST CURL-ARGS...: curl to https://HOST:$port/ (resolved to
# loopback); $tmp/NAME.body, and "STATUS VERIFY-RESULT EXIT" printed.
hosted() {
    local name=$1 h=$2 rc=0 out
    shift 2
    out=$(curl -sS --max-time 20 --resolve "$h:$port:127.0.0.1" -o "$tmp/$name.body" \
        -w '%{http_code} %{ssl_verify_result}' "$@" "https://$h:$port/" 2>"$tmp/$name.err") || rc=$?
    echo "$out $rc"
}
got=$(hosted good "$host" --cacert "$pki/root.pem")
[ "$got" = "404 0 0" ] || fail "curl --cacert ROOT $url: '$got' (want 404, verified, exit 0): $(cat "$tmp/good.err")"
grep -q 'Sandboxer · HTTP 404' "$tmp/good.body" || fail "the hosted URL's answer is not sbxd's page: $(head -c 300 "$tmp/good.body")"
# The bare domain is in the certificate too (a hosted URL is never it, but
# the proxy answers it with its page).
got=$(hosted bare "$domain" --cacert "$pki/root.pem")
[ "${got#* }" = "0 0" ] || fail "curl --cacert ROOT https://$domain: '$got': $(cat "$tmp/bare.err")"
# What is served: the operator's leaf, then its intermediate.
openssl s_client -connect "127.0.0.1:$port" -servername "$host" -showcerts </dev/null >"$tmp/s_client.out" 2>&1 || true
awk '/BEGIN CERTIFICATE/,/END CERTIFICATE/' "$tmp/s_client.out" >"$tmp/served.pem"
served=$(awk '/BEGIN CERTIFICATE/ { n++ } END { print n + 0 }' "$tmp/served.pem")
[ "$served" = 2 ] || fail "s_client: $served certificates served, want 2 (leaf, intermediate)"
fp() { openssl x509 -noout -fingerprint -sha256 -in "$1" 2>/dev/null; }
[ "$(fp "$tmp/served.pem")" = "$(fp "$pki/leaf.pem")" ] || fail "the served leaf is not the operator's: $(fp "$tmp/served.pem")"
openssl s_client -connect "127.0.0.1:$port" -servername "$host" -CAfile "$pki/root.pem" -verify_return_error \
    -verify_hostname "$host" </dev/null >"$tmp/s_client2.out" 2>&1 ||
    fail "s_client -CAfile ROOT -verify_hostname $host: $(grep -i verify "$tmp/s_client2.out" | head -n 3)"
grep -q 'Verify return code: 0 (ok)' "$tmp/s_client2.out" || fail "s_client -CAfile ROOT does not verify"

# 3. What must not validate (curl exits 60: the peer's certificate cannot be authenticated).
got=$(hosted stranger "$host" --cacert "$pki/stranger.pem")
[ "${got##* }" = 60 ] || fail "curl --cacert STRANGER validated the operator's certificate: '$got'"
got=$(hosted system "$host")
[ "${got##* }" = 60 ] || fail "curl with the system's CAs validated the operator's test certificate: '$got'"
got=$(hosted deeper "a.$host" --cacert "$pki/root.pem")
[ "${got##* }" = 60 ] || fail "a name two labels below $domain matched *.$domain: '$got'"
got=$(hosted otherdomain "abcde-8080.other.test" --cacert "$pki/root.pem")
[ "${got##* }" = 60 ] || fail "a name of another domain matched *.$domain: '$got'"
grep -qi 'subject' "$tmp/otherdomain.err" || fail "curl's reason for another domain: $(cat "$tmp/otherdomain.err")"

# 4. No certificate of sbxd's own: /v1/ca is 404, and no CA was made.
code=$(curl -sS --unix-socket "$sock" -o "$tmp/ca.json" -w '%{http_code}' http://sbxd/v1/ca)
[ "$code" = 404 ] || fail "GET /v1/ca with --proxy-cert: $code $(cat "$tmp/ca.json")"
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["code"] != "not_found")' "$tmp/ca.json" ||
    fail "GET /v1/ca: $(cat "$tmp/ca.json")"
[ ! -e "$tmp/state/ca" ] || fail "sbxd made a CA of its own ($tmp/state/ca) though it has the operator's certificate"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || fail "sbxd exits $rc on SIGTERM, not 0"

# 5. Refused at start: exit 1 within seconds, no listener, the error in the log.
# refused NAME WANT ARGS...: sbxd with ARGS must exit 1 and log WANT (grep -F).
refused() {
    local name=$1 want=$2 rc=0
    shift 2
    run_sbxd "$tmp/$name.log" "$@"
    for _ in $(seq 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        fail "$name: sbxd still runs after 15 s"
        kill -KILL "$pid"
    fi
    wait "$pid" || rc=$?
    pid=
    [ "$rc" = 1 ] || fail "$name: sbxd exits $rc, want 1"
    grep -qF -- "$want" "$tmp/$name.log" || fail "$name: the log does not say '$want': $(grep error "$tmp/$name.log")"
    ! grep -q 'listening on' "$tmp/$name.log" || fail "$name: sbxd listened before it refused: $(cat "$tmp/$name.log")"
    [ ! -S "$sock" ] || fail "$name: its socket is there"
    echo "refused ($name): $(grep -o 'error: .*' "$tmp/$name.log" | head -n 1)"
}
rm -f "$sock"
refused mismatch "the private key does not match the certificate" \
    --proxy-cert "$pki/chain.pem" --proxy-key "$pki/other.key"
refused missing "--proxy-cert $pki/nothing.pem: cannot read it" \
    --proxy-cert "$pki/nothing.pem" --proxy-key "$pki/leaf.key"
printf 'not a certificate\n' >"$pki/garbage.pem"
refused not-pem "the certificate chain does not load" \
    --proxy-cert "$pki/garbage.pem" --proxy-key "$pki/leaf.key"
: >"$pki/empty.key"
refused empty-key "the private key is empty" \
    --proxy-cert "$pki/chain.pem" --proxy-key "$pki/empty.key"
refused cert-alone "--proxy-cert and --proxy-key go together" --proxy-cert "$pki/chain.pem"
# A key sbxd cannot read: as root, sbxd runs as nobody for this one (a
# 0600 key of root's); as another user, the key is mode 000.
cp "$pki/leaf.key" "$pki/locked.key"
if [ "$(id -u)" = 0 ]; then
    if command -v setpriv >/dev/null && nobody=$(id -u nobody 2>/dev/null); then
        chmod 0600 "$pki/locked.key"
        # a folder nobody may use: the state, the socket and the certificate
        other=$(mktemp -d /tmp/sbxd-proxy-cert-nobody-XXXXXX)
        chmod 0755 "$other"
        cp "$pki/chain.pem" "$other/chain.pem"
        cp "$pki/locked.key" "$other/locked.key"
        chmod 0644 "$other/chain.pem"
        chown "$nobody" "$other"
        rc=0
        timeout 15 setpriv --reuid="$nobody" --regid="$(id -g nobody)" --clear-groups \
            "$sbxd" --network off --state-dir "$other/state" --images "$other/no-images" --listen "unix:$other/sbxd.sock" \
            --cgroup-root off --proxy-listen "tcp:127.0.0.1:$port" --proxy-domain "$domain" \
            --proxy-cert "$other/chain.pem" --proxy-key "$other/locked.key" 2>"$tmp/unreadable.log" || rc=$?
        [ "$rc" = 1 ] || fail "unreadable: sbxd as nobody exits $rc, want 1: $(cat "$tmp/unreadable.log")"
        grep -qF -- "--proxy-key $other/locked.key: cannot read it" "$tmp/unreadable.log" ||
            fail "unreadable: $(cat "$tmp/unreadable.log")"
        echo "refused (unreadable): $(grep -o 'error: .*' "$tmp/unreadable.log" | head -n 1)"
        rm -rf "$other"
    else
        echo "(no setpriv or no user nobody: the unreadable key is not tried)"
    fi
else
    chmod 000 "$pki/locked.key"
    refused unreadable "--proxy-key $pki/locked.key: cannot read it" \
        --proxy-cert "$pki/chain.pem" --proxy-key "$pki/locked.key"
fi

[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "ok: sbxd serves the operator's certificate and refuses a bad one at start"

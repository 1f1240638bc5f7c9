#!/usr/bin/env bash
# Test-only TLS material for the local Kafka's secured listeners (openssl only; idempotent).
#
#   deploy/kafka/tls.sh DIR
#
# Writes into DIR (kept when present):
#   ca.key, ca.pem            a self-signed CA (RSA 2048, 825 days): clients trust ca.pem
#   broker.key, broker.pem    the broker's certificate, SAN IP:127.0.0.1 and DNS:localhost
#   broker.p12                PKCS#12 keystore (key + chain) for ssl.keystore.location
#   store.password            its password (random, 0600)
#   scram.password            the password of the SCRAM user `casestream` (random, 0600)
# Nothing here is a production secret: the keys live in the git-ignored .local/ only.
set -euo pipefail

dir=${1:?usage: tls.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077
command -v openssl >/dev/null || { echo "tls.sh: openssl not found (Debian: apt-get install -y openssl)" >&2; exit 1; }

random() { openssl rand -hex 16; }
[[ -s store.password ]] || random >store.password
[[ -s scram.password ]] || random >scram.password
if [[ -s broker.p12 && -s ca.pem ]]; then exit 0; fi

openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=casestream local test CA" \
    -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >broker.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
    -extfile broker.ext -out broker.pem 2>/dev/null
openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
    -passout "pass:$(<store.password)" -out broker.p12
rm -f broker.csr broker.ext ca.srl
chmod 0644 ca.pem

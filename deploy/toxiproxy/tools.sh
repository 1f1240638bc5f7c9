#!/usr/bin/env bash
# Toxiproxy (a TCP proxy whose faults — latency, bandwidth, resets, timeouts, byte limits — are
# set through an HTTP API), built here from the Go module proxy and cached in
# .local/toxiproxy/bin (the way deploy/prometheus/tools.sh builds promtool), for the chaos rig
# (services/chaos.py):
#
#   deploy/toxiproxy/tools.sh install   build toxiproxy-server (idempotent; cold: ~1 min on 2 cores)
#   deploy/toxiproxy/tools.sh path      print the path of toxiproxy-server
set -euo pipefail

TOXIPROXY_VERSION=${TOXIPROXY_VERSION:-v2.12.0}   # Go module github.com/Shopify/toxiproxy/v2

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${CASESTREAM_LOCAL_DIR:-$REPO/.local}/toxiproxy"
BIN="$DIR/bin"
STAMP="$BIN/.toxiproxy-$TOXIPROXY_VERSION"

die() { echo "toxiproxy-tools: error: $*" >&2; exit 1; }

install() {
    if [[ -x "$BIN/toxiproxy-server" && -f "$STAMP" ]]; then return 0; fi
    command -v go >/dev/null 2>&1 || die "Go is needed to build toxiproxy-server: install Go (>= 1.22), then rerun."
    echo "toxiproxy-tools: building toxiproxy-server from the Go module proxy (github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION)" >&2
    local t0=$SECONDS
    mkdir -p "$BIN"
    (cd "$DIR" && GOBIN="$BIN" GOFLAGS=-trimpath go install -ldflags "-s -w" \
        "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION") \
        || die "go install toxiproxy-server failed (see the go output above)."
    mv -f "$BIN/server" "$BIN/toxiproxy-server"   # the module names its command cmd/server
    rm -f "$BIN/.toxiproxy-"*
    touch "$STAMP"
    echo "toxiproxy-tools: built $BIN/toxiproxy-server in $((SECONDS - t0)) s" >&2
}

case "${1:-}" in
    install) install ;;
    path) echo "$BIN/toxiproxy-server" ;;
    *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# promtool, built here from the Go module proxy and cached in .local/prometheus/bin (the way
# deploy/k8s/tools.sh builds helm), to check deploy/prometheus/alerts.yml:
#
#   deploy/prometheus/tools.sh install     build promtool (idempotent; cold: minutes on 2 cores)
#   deploy/prometheus/tools.sh path        print the path of promtool
#   deploy/prometheus/tools.sh check       promtool check rules deploy/prometheus/alerts.yml, then
#                                          promtool test rules deploy/prometheus/alerts_test.yml
#   deploy/prometheus/tools.sh rules BASE  print alerts.yml with runbook_url = BASE#<anchor>
#                                          (BASE: where you publish docs/runbook.md)
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}   # Go module version of Prometheus 3.x

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${CASESTREAM_LOCAL_DIR:-$REPO/.local}/prometheus"
BIN="$DIR/bin"
STAMP="$BIN/.promtool-$PROMETHEUS_VERSION-remove_all_sd"

die() { echo "prometheus-tools: error: $*" >&2; exit 1; }

install() {
    if [[ -x "$BIN/promtool" && -f "$STAMP" ]]; then return 0; fi
    command -v go >/dev/null 2>&1 || die "Go is needed to build promtool: install Go (>= 1.24), then rerun."
    echo "prometheus-tools: building promtool from the Go module proxy (github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION)" >&2
    local t0=$SECONDS
    mkdir -p "$BIN"
    # remove_all_sd: without the cloud service-discovery plugins (AWS, Azure, GCE, Kubernetes ...),
    # which promtool does not need to check rules and which are most of the build
    (cd "$DIR" && GOBIN="$BIN" GOFLAGS=-trimpath go install -tags remove_all_sd -ldflags "-s -w" \
        "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION") \
        || die "go install promtool failed (see the go output above)."
    rm -f "$BIN/.promtool-"*
    touch "$STAMP"
    echo "prometheus-tools: built $BIN/promtool in $((SECONDS - t0)) s" >&2
}

# the placeholder base of alerts.yml's runbook_url annotations
RUNBOOK_BASE_DEFAULT="https://runbooks.example.com/casestream/runbook.md"

rules() {
    local base="${1:-}"
    [[ "$base" =~ ^https?://[^[:space:]#]+$ ]] || die "rules wants BASE, an http(s) URL without '#' (got '${base}')."
    sed "s|runbook_url: $RUNBOOK_BASE_DEFAULT#|runbook_url: $base#|" "$HERE/alerts.yml"
}

case "${1:-}" in
    install) install ;;
    path) echo "$BIN/promtool" ;;
    check) install
           "$BIN/promtool" check rules "$HERE/alerts.yml"
           (cd "$HERE" && "$BIN/promtool" test rules alerts_test.yml) ;;
    rules) rules "${2:-}" ;;
    *) echo "usage: $0 install|path|check|rules BASE" >&2; exit 2 ;;
esac

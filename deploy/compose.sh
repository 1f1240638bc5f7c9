#!/usr/bin/env bash
# Make `docker compose` available for `docker compose config` (tests/contract/test_compose.py),
# also on machines without a Docker engine or the compose plugin.
#
#   deploy/compose.sh install   ensure a compose v2+ CLI exists (idempotent, ~0.1 s when present)
#   deploy/compose.sh path      print the command to run (`docker compose` or a binary path)
#
# If neither `docker compose` nor a v2+ `docker-compose` answers, the Docker Compose plugin is
# built from its Go module (github.com/docker/compose/v5 at $COMPOSE_VERSION) with the local Go
# toolchain and installed as ~/.docker/cli-plugins/docker-compose, the standard plugin location
# (shared by every checkout; Go's module and build caches make a rebuild fast). The module is
# built inside its own module directory so that its go.mod replace/exclude directives apply
# (`go install pkg@version` refuses modules that have them). Cold: about 100 s on 2 cores.
set -euo pipefail

COMPOSE_VERSION=${COMPOSE_VERSION:-v5.6.0}   # needs Go >= 1.26.8
COMPOSE_MODULE=github.com/docker/compose/v5
PLUGIN_DIR=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
PLUGIN=$PLUGIN_DIR/docker-compose

log() { echo "compose: $*" >&2; }
die() { echo "compose: error: $*" >&2; exit 1; }

# find_compose: print the compose command line that works, or fail.
find_compose() {
    if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
        echo "docker compose"; return 0
    fi
    local bin
    for bin in "$(command -v docker-compose 2>/dev/null || true)" "$PLUGIN"; do
        [[ -n "$bin" && -x "$bin" ]] || continue
        # v1 (Python, 1.x) predates the Compose Specification: not good enough.
        if "$bin" version 2>/dev/null | grep -qE 'v?([2-9]|[1-9][0-9])\.[0-9]+'; then
            echo "$bin"; return 0
        fi
    done
    return 1
}

install_compose() {
    if find_compose >/dev/null; then return 0; fi
    command -v go >/dev/null 2>&1 \
        || die "no 'docker compose' and no Go toolchain to build it. Install Docker Compose v2+ (docker-compose-plugin) or Go >= 1.26.8, then rerun."
    log "building Docker Compose $COMPOSE_VERSION from the Go module proxy (one time, ~100 s)"
    local t0=$SECONDS dir
    dir="$(go mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')" \
        || die "go mod download $COMPOSE_MODULE@$COMPOSE_VERSION failed."
    [[ -n "$dir" && -d "$dir" ]] || die "go mod download gave no module directory for $COMPOSE_MODULE@$COMPOSE_VERSION."
    mkdir -p "$PLUGIN_DIR"
    (cd "$dir" && GOFLAGS=-mod=readonly go build -trimpath \
        -ldflags "-s -w -X $COMPOSE_MODULE/internal.Version=$COMPOSE_VERSION" \
        -o "$PLUGIN.tmp" ./cmd) || die "building Docker Compose failed (see the go output above)."
    mv "$PLUGIN.tmp" "$PLUGIN"
    find_compose >/dev/null || die "built $PLUGIN but it does not answer 'version'."
    log "installed $PLUGIN ($COMPOSE_VERSION) in $((SECONDS - t0)) s"
}

case "${1:-}" in
    install) install_compose ;;
    path) find_compose || die "no compose CLI: run 'deploy/compose.sh install' (or 'make compose')." ;;
    *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac

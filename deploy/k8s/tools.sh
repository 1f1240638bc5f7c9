#!/usr/bin/env bash
# The Kubernetes tools the chart's contract test uses, built here from the Go module proxy and
# cached in .local/k8s/ (like deploy/compose.sh builds the compose plugin):
#
#   deploy/k8s/tools.sh install     helm + kubeconform binaries and the JSON schemas (idempotent)
#   deploy/k8s/tools.sh path NAME   print the path of helm | kubeconform | schemas
#
# helm (helm.sh/helm/v3 $HELM_VERSION) and kubeconform (github.com/yannh/kubeconform
# $KUBECONFORM_VERSION) are built with `go install` into .local/k8s/bin. kubeconform needs a
# JSON schema per kind; they are generated offline (deploy/k8s/json_schemas.py) from the
# OpenAPI document api/openapi-spec/swagger.json of the Go module k8s.io/kubernetes
# $KUBERNETES_VERSION, from KEDA's CRDs in github.com/kedacore/keda/v2 $KEDA_VERSION and from
# the Prometheus operator's PrometheusRule CRD in github.com/prometheus-operator/prometheus-operator
# $PROMETHEUS_OPERATOR_VERSION (all fetched with `go mod download`, nothing compiled) into
# .local/k8s/schemas. The CRDs
# are YAML: the helm just built turns them into JSON (its own YAML parser), so the generator
# needs the Python standard library alone — any python3 (CASESTREAM_PYTHON, else python3 on
# PATH: the active virtual environment, else the repository's .venv).
# Cold: a few minutes on 2 cores (helm is the long build); then 0.1 s.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
KUBECONFORM_VERSION=${KUBECONFORM_VERSION:-v0.8.0}
KUBERNETES_VERSION=${KUBERNETES_VERSION:-v1.37.2}
KEDA_VERSION=${KEDA_VERSION:-v2.21.0}
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${CASESTREAM_LOCAL_DIR:-$REPO/.local}/k8s"
BIN="$DIR/bin"
SCHEMAS="$DIR/schemas"
STAMP="$SCHEMAS/.generated-$KUBERNETES_VERSION-$KEDA_VERSION-$PROMETHEUS_OPERATOR_VERSION"
PYTHON="${CASESTREAM_PYTHON:-$(command -v python3 || echo "$REPO/.venv/bin/python")}"

log() { echo "k8s-tools: $*" >&2; }
die() { echo "k8s-tools: error: $*" >&2; exit 1; }

module_dir() {  # module_dir <module@version>: download it (module cache) and print its directory
    go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}

build() {  # build <binary> <package@version>
    local name=$1 pkg=$2 stamp="$BIN/.$1-${2##*@}"
    if [[ -x "$BIN/$name" && -f "$stamp" ]]; then return 0; fi
    command -v go >/dev/null 2>&1 || die "Go is needed to build $name ($pkg): install Go (>= 1.24), then rerun."
    log "building $name from the Go module proxy ($pkg)"
    local t0=$SECONDS
    mkdir -p "$BIN"
    (cd "$DIR" && GOBIN="$BIN" GOFLAGS=-trimpath go install -ldflags "-s -w" "$pkg") \
        || die "go install $pkg failed (see the go output above)."
    rm -f "$BIN/.$name-"*
    touch "$stamp"
    log "built $BIN/$name in $((SECONDS - t0)) s"
}

crd_json() {  # crd_json <crd.yaml> <out.json>: its YAML documents as JSON, one per line
    local chart
    chart="$(mktemp -d)"
    mkdir -p "$chart/templates"
    printf 'apiVersion: v2\nname: crd-json\nversion: 0.0.0\n' > "$chart/Chart.yaml"
    cp "$1" "$chart/crd.yaml"
    cat > "$chart/templates/crd.yaml" <<'TEMPLATE'
{{- range $doc := regexSplit "(?m)^---[ \t]*$" (.Files.Get "crd.yaml") -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.Error }}{{ fail (printf "not YAML: %s" $obj.Error) }}{{ end }}
{{- if $obj }}
---
{{ toJson $obj }}
{{- end }}
{{- end }}
TEMPLATE
    local ok=0
    "$BIN/helm" template crd-json "$chart" --show-only templates/crd.yaml | grep '^{' > "$2" || ok=$?
    rm -rf "$chart"
    [[ $ok -eq 0 ]] || die "converting $1 to JSON with helm failed."
}

schemas() {
    if [[ -f "$STAMP" ]]; then return 0; fi
    local k8s keda operator tmp
    k8s="$(module_dir "k8s.io/kubernetes@$KUBERNETES_VERSION")" || die "go mod download k8s.io/kubernetes@$KUBERNETES_VERSION failed."
    keda="$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")" || die "go mod download github.com/kedacore/keda/v2@$KEDA_VERSION failed."
    operator="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")" \
        || die "go mod download github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION failed."
    [[ -f "$k8s/api/openapi-spec/swagger.json" ]] || die "$k8s has no api/openapi-spec/swagger.json."
    tmp="$(mktemp -d)"
    crd_json "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" "$tmp/scaledobjects.json"
    crd_json "$keda/config/crd/bases/keda.sh_triggerauthentications.yaml" "$tmp/triggerauthentications.json"
    crd_json "$operator/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" "$tmp/prometheusrules.json"
    rm -rf "$SCHEMAS"
    "$PYTHON" "$HERE/json_schemas.py" --out "$SCHEMAS" --swagger "$k8s/api/openapi-spec/swagger.json" \
        --crd "$tmp/scaledobjects.json" --crd "$tmp/triggerauthentications.json" \
        --crd "$tmp/prometheusrules.json" \
        || { rm -rf "$tmp"; die "generating the JSON schemas failed ($PYTHON)."; }
    rm -rf "$tmp"
    touch "$STAMP"
}

case "${1:-}" in
    install)
        mkdir -p "$DIR"
        build kubeconform "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
        build helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
        schemas ;;
    path)
        case "${2:-}" in
            helm|kubeconform) [[ -x "$BIN/$2" ]] || die "$2 not built: run 'deploy/k8s/tools.sh install' (or 'make k8s-tools')."; echo "$BIN/$2" ;;
            schemas) [[ -f "$STAMP" ]] || die "no JSON schemas: run 'deploy/k8s/tools.sh install' (or 'make k8s-tools')."; echo "$SCHEMAS" ;;
            *) die "path helm | kubeconform | schemas" ;;
        esac ;;
    *) echo "usage: $0 install | path helm|kubeconform|schemas" >&2; exit 2 ;;
esac

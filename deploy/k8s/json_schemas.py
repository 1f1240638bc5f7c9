"""Kubernetes JSON schemas for kubeconform, generated offline from OpenAPI documents.

kubeconform validates each rendered object against ``<dir>/<kind><suffix>.json``
(``deployment-apps-v1.json``, ``service-v1.json``, ``scaledobject-keda-v1alpha1.json``:
kind lower-cased, then ``-<first part of the API group>`` unless core, then ``-<version>``).
This script writes such files, standalone (every ``$ref`` inlined) and strict (objects with
declared properties refuse unknown ones, as ``kubeconform -strict`` expects), from:

* ``--swagger``: the Kubernetes API's OpenAPI v2 document ``api/openapi-spec/swagger.json``
  shipped in the ``k8s.io/kubernetes`` Go module;
* ``--crd``: CustomResourceDefinitions (``spec.versions[].schema.openAPIV3Schema``) as JSON,
  one document per line, e.g. KEDA's ``config/crd/bases/keda.sh_scaledobjects.yaml`` from its
  Go module, which ``deploy/k8s/tools.sh`` converts with helm (``fromYaml | toJson``).

Usage: ``python deploy/k8s/json_schemas.py --out DIR --swagger swagger.json --crd a.json ...``
(the Python standard library alone: it runs in any user's environment).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# OpenAPI formats whose JSON values take two types (kubectl accepts both).
_TWO_TYPES = {"int-or-string": ["string", "integer"]}
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def file_name(kind: str, group: str, version: str) -> str:
    """kubeconform's name for a kind's schema file (its ``{{ .ResourceKind }}{{ .KindSuffix }}``)."""
    suffix = f"-{group.split('.')[0].lower()}" if group else ""
    return f"{kind.lower()}{suffix}-{version.lower()}.json"


def _strict(node: Any) -> Any:
    """Copy of ``node`` where every object schema with properties refuses unknown keys."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _inline(node: Any, definitions: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``node`` with ``#/definitions/...`` references replaced by their (inlined) targets;
    a reference back into its own chain (a recursive type) becomes ``{}`` (anything)."""
    if isinstance(node, list):
        return [_inline(n, definitions, seen) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        name = ref.split("/")[-1]
        if name in seen:
            return {}
        if name == _QUANTITY:
            return {"oneOf": [{"type": "string"}, {"type": "number"}]}
        return _inline(definitions[name], definitions, (*seen, name))
    out = {k: _inline(v, definitions, seen) for k, v in node.items() if k != "$ref"}
    if isinstance(out.get("format"), str) and out["format"] in _TWO_TYPES:
        out = {k: v for k, v in out.items() if k not in ("type", "format")}
        out["oneOf"] = [{"type": t} for t in _TWO_TYPES[node["format"]]]
    return out


def from_swagger(path: Path, out: Path) -> int:
    doc = json.loads(path.read_text(encoding="utf-8"))
    definitions = doc["definitions"]
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            schema = _strict(_inline(definition, definitions, (name,)))
            schema["$schema"] = "http://json-schema.org/schema#"
            (out / file_name(gvk["kind"], gvk.get("group", ""), gvk["version"])).write_text(
                json.dumps(schema), encoding="utf-8")
            written += 1
    return written


def from_crd(path: Path, out: Path) -> int:
    written = 0
    docs = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    for doc in docs:
        if not doc or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        for version in spec["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            schema["$schema"] = "http://json-schema.org/schema#"
            (out / file_name(spec["names"]["kind"], spec["group"], version["name"])).write_text(
                json.dumps(schema), encoding="utf-8")
            written += 1
    return written


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="json_schemas.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory to write the schemas to")
    ap.add_argument("--swagger", type=Path, help="Kubernetes OpenAPI v2 document (swagger.json)")
    ap.add_argument("--crd", type=Path, action="append", default=[],
                    help="CRD documents as JSON, one per line (repeatable)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    n = from_swagger(a.swagger, a.out) if a.swagger else 0
    for crd in a.crd:
        n += from_crd(crd, a.out)
    print(f"json_schemas: {n} schemas in {a.out}", file=sys.stderr)
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

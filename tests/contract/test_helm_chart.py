"""Contract: the Helm chart in deploy/helm/casestream lints, and renders for three value sets
(the suite's deploy/helm/suite-values.yaml; that plus ci/production-values.yaml: SASL_SSL,
registry basic auth, JWKS, KEDA; and ci/team-values.yaml: a team's watch service alone) into
objects that kubeconform validates strictly against the Kubernetes API's JSON schemas and
KEDA's CRDs. It deploys and migrates exactly the services named in values.

helm, kubeconform and the schemas come from ``deploy/k8s/tools.sh install`` (``make
k8s-tools``, a prerequisite of ``make test``): built from the Go module proxy, the schemas
generated from the OpenAPI document of the ``k8s.io/kubernetes`` module. The test fails,
never skips, when they are missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "casestream"
SUITE = ["-f", str(REPO / "deploy" / "helm" / "suite-values.yaml")]
PRODUCTION = [*SUITE, "-f", str(CHART / "ci" / "production-values.yaml")]
TEAM = ["-f", str(CHART / "ci" / "team-values.yaml")]
VALUE_SETS = pytest.mark.parametrize("values", [SUITE, PRODUCTION, TEAM], ids=["suite", "production", "team"])
SERVICES = {"case": 18101, "audit": 18102, "saga": 18103, "decision": 18104, "notification": 18105}


def _tool(name: str) -> str:
    proc = subprocess.run([str(REPO / "deploy" / "k8s" / "tools.sh"), "path", name],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.fail(f"{proc.stderr.strip()} -- run `make k8s-tools`.", pytrace=False)
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def helm() -> str:
    return _tool("helm")


@pytest.fixture(scope="module")
def kubeconform() -> list[str]:
    schemas = _tool("schemas")
    return [_tool("kubeconform"), "-strict", "-summary", "-output", "json",
            "-schema-location", f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json"]


def _template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, "template", "cs", str(CHART), *args], capture_output=True, text=True,
                          timeout=60)


def _rendered(helm: str, *args: str) -> tuple[str, list[dict[str, Any]]]:
    proc = _template(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, [d for d in yaml.safe_load_all(proc.stdout) if d]


def _validate(kubeconform: list[str], manifest: str) -> dict[str, Any]:
    proc = subprocess.run([*kubeconform, "-"], input=manifest, capture_output=True, text=True, timeout=60)
    report = json.loads(proc.stdout)
    report["returncode"] = proc.returncode
    return report


@VALUE_SETS
def test_the_chart_lints(helm: str, values: list[str]) -> None:
    proc = subprocess.run([helm, "lint", "--strict", str(CHART), *values], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@VALUE_SETS
def test_every_rendered_object_is_valid_kubernetes(helm: str, kubeconform: list[str], values: list[str]) -> None:
    manifest, docs = _rendered(helm, *values)
    report = _validate(kubeconform, manifest)
    summary = report["summary"]
    assert report["returncode"] == 0 and summary["invalid"] == 0 and summary["errors"] == 0, report
    assert summary["skipped"] == 0 and summary["valid"] == len(docs), summary


def test_kubeconform_refuses_an_unknown_field(helm: str, kubeconform: list[str]) -> None:
    manifest, _ = _rendered(helm, *SUITE)
    broken = manifest.replace("terminationGracePeriodSeconds: 60", "terminationGracePeriod: 60", 1)
    assert broken != manifest
    report = _validate(kubeconform, broken)
    assert report["returncode"] != 0 and report["summary"]["invalid"] == 1


def test_one_deployment_per_service_with_probes_migration_job_and_pdbs(helm: str) -> None:
    _, docs = _rendered(helm, *SUITE)
    by_kind: dict[str, dict[str, Any]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    assert set(by_kind["Deployment"]) == {f"cs-{s}" for s in SERVICES}
    assert set(by_kind["PodDisruptionBudget"]) == {f"cs-{s}" for s in SERVICES}
    images = set()
    for name, port in SERVICES.items():
        pod = by_kind["Deployment"][f"cs-{name}"]["spec"]["template"]["spec"]
        [c] = pod["containers"]
        images.add(c["image"])
        assert c["command"] == ["python", "-m", f"services.{name}"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["CASESTREAM_MIGRATE_AT_START"] == "false"
        assert env["CASESTREAM_ENV"] == "production" and env["CASESTREAM_AUTO_REGISTER_SCHEMAS"] == "false"
        assert env[f"CASESTREAM_{name.upper()}_PORT"] == str(port)
        assert env["CASESTREAM_PG_PASSWORD_FILE"] == "/run/secrets/casestream/pg-password"
        assert env["CASESTREAM_BUILD"] == "0.1.0"  # the image tag, in the consumers' client ids
    assert len(images) == 1  # one image for every service
    assert set(by_kind["Job"]) == {f"cs-migrate-{s}" for s in SERVICES}
    for name in SERVICES:
        job = by_kind["Job"][f"cs-migrate-{name}"]
        assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
            "python", "-m", "casestream", "migrate", name]
        assert "pre-upgrade" in job["metadata"]["annotations"]["helm.sh/hook"]
    notification = by_kind["Job"]["cs-migrate-notification"]["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e["value"] for e in notification["env"]}["CASESTREAM_SMTP_HOST"] == "smtp-relay"
    assert "ScaledObject" not in by_kind


def test_production_values_scale_on_lag_capped_by_partitions(helm: str) -> None:
    _, docs = _rendered(helm, *PRODUCTION)
    scaled = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ScaledObject"}
    assert set(scaled) == {f"cs-{s}" for s in SERVICES}
    case = scaled["cs-case"]["spec"]
    assert [t["metadata"]["consumerGroup"] for t in case["triggers"]] == ["case.saga-requests", "case.dashboard", "case.workload"]
    assert case["maxReplicaCount"] == 6  # 12 partitions / consumer concurrency 2
    assert all(t["authenticationRef"]["name"] == "cs-kafka" for t in case["triggers"])
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "cs-case")
    assert "replicas" not in deployment["spec"]  # KEDA owns the count
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE"] == "/run/secrets/casestream/kafka-password"
    assert env["CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO_FILE"] == "/run/secrets/casestream/registry-user-info"
    assert env["CASESTREAM_AUTH_JWKS_URL"].startswith("https://")


def test_a_replica_cap_above_the_partitions_is_refused(helm: str) -> None:
    proc = _template(helm, *PRODUCTION, "--set", "services.audit.maxReplicas=7")
    assert proc.returncode != 0
    assert "exceeds partitions/consumerConcurrency = 6" in proc.stderr


def _env(container: dict[str, Any]) -> dict[str, str | None]:
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names)), names  # an override replaces, never repeats
    return {e["name"]: e.get("value") for e in container["env"]}


def test_a_team_release_deploys_and_migrates_its_own_service_alone(helm: str) -> None:
    _, docs = _rendered(helm, *TEAM, "--set", "services.watch.env.CASESTREAM_PG_URL=postgresql://watch@db-2:5432")
    named = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] not in ("Secret",)}
    assert named == {("Deployment", "cs-watch"), ("Service", "cs-watch"),
                     ("PodDisruptionBudget", "cs-watch"), ("Job", "cs-migrate-watch")}
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    [app] = deployment["spec"]["template"]["spec"]["containers"]
    [job] = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]["containers"]
    assert job["command"] == ["python", "-m", "casestream", "migrate", "watch"]
    assert app["image"] == job["image"] == "registry.example.com/food-safety/watch:1.4.2"
    assert app["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert _env(app)["CASESTREAM_BUILD"] == "1.4.2"  # its image tag: seen by a re-drive after deploy
    for container in (app, job):  # the service's own database reaches its migration too
        env = _env(container)
        assert env["CASESTREAM_WATCH_DATABASE"] == "watch_prod"
        assert env["CASESTREAM_PG_URL"] == "postgresql://watch@db-2:5432"
        assert env["CASESTREAM_PG_PASSWORD_FILE"] == "/run/secrets/casestream/pg-password"


def test_a_disabled_service_is_neither_deployed_nor_migrated(helm: str) -> None:
    _, docs = _rendered(helm, *SUITE, "--set", "services.saga.enabled=false")
    names = {d["metadata"]["name"] for d in docs}
    assert "cs-saga" not in names and "cs-migrate-saga" not in names and "cs-migrate-case" in names


@pytest.mark.parametrize(("values", "message"), [
    ([], "services: no service to deploy; name each one under services"),
    ([*TEAM, "--set", "services.watch.module="], "services.watch.module is required"),
], ids=["no-service", "no-module"])
def test_a_release_without_a_complete_service_is_refused_in_one_line(
        helm: str, values: list[str], message: str) -> None:
    proc = _template(helm, *values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_a_statefulset_gives_each_pod_its_name_as_static_member_identity(
        helm: str, kubeconform: list[str]) -> None:
    manifest, docs = _rendered(helm, *PRODUCTION, "--set", "workload=StatefulSet",
                               "--set", "kafka.groupProtocol=consumer")
    report = _validate(kubeconform, manifest)
    assert report["returncode"] == 0 and report["summary"]["invalid"] == 0, report
    assert report["summary"]["valid"] == len(docs), report["summary"]
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet"}
    assert set(sets) == {f"cs-{s}" for s in SERVICES}
    assert not [d for d in docs if d["kind"] == "Deployment"]
    container = sets["cs-case"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["CASESTREAM_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["CASESTREAM_KAFKA_GROUP_PROTOCOL"]["value"] == "consumer"
    scaled = next(d for d in docs if d["kind"] == "ScaledObject" and d["metadata"]["name"] == "cs-case")
    assert scaled["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_an_unknown_workload_kind_is_refused(helm: str) -> None:
    proc = _template(helm, *SUITE, "--set", "workload=Pod")
    assert proc.returncode != 0 and "workload must be Deployment or StatefulSet" in proc.stderr


ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
RUNBOOK_BASE = "https://docs.example.com/casestream/runbook"  # ci/production-values.yaml


def _prometheus_rule(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    return rule


def test_production_values_render_every_alert_rule_as_a_prometheus_rule(helm: str, tmp_path: Path) -> None:
    _, docs = _rendered(helm, *PRODUCTION)
    obj = _prometheus_rule(docs)
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["metadata"]["name"] == "cs-alerts"
    assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # the ruleSelector's label
    source = {r["alert"]: r for g in yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
              for r in g["rules"]}
    rendered = {r["alert"]: r for g in obj["spec"]["groups"] for r in g["rules"]}
    assert set(rendered) == set(source) and len(source) >= 15
    for name, rule in rendered.items():
        want = source[name]
        assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#{name.lower()}"
        assert rule["annotations"]["summary"] == want["annotations"]["summary"]  # {{ $labels }} kept
        assert rule["labels"] == {**want["labels"], "team": "regulator-platform"}
        assert rule.get("for") == want.get("for")
        assert rule["expr"] == want["expr"].replace('job=~"casestream.*"', 'job=~"cs-.*"')
    assert 'job=~"cs-.*"' in rendered["CasestreamServiceDown"]["expr"]  # a ServiceMonitor's jobs
    # the rendered spec is a rules file Prometheus itself loads: promtool checks it
    rules_file = tmp_path / "rendered-rules.yml"
    rules_file.write_text(yaml.safe_dump(obj["spec"]), encoding="utf-8")
    promtool = subprocess.run([str(REPO / "deploy" / "prometheus" / "tools.sh"), "path"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    if not Path(promtool).is_file():
        pytest.fail("promtool not built -- run `make prometheus-tools`.", pytrace=False)
    proc = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and f"SUCCESS: {len(source)} rules found" in proc.stdout, proc.stdout + proc.stderr


def test_the_prometheus_rule_is_off_by_default_and_takes_a_job_regex(helm: str) -> None:
    _, docs = _rendered(helm, *SUITE)
    assert not [d for d in docs if d["kind"] == "PrometheusRule"]
    _, docs = _rendered(helm, *PRODUCTION, "--set", "prometheusRule.serviceJobRegex=casestream-.*")
    [down] = [r for g in _prometheus_rule(docs)["spec"]["groups"] for r in g["rules"]
              if r["alert"] == "CasestreamServiceDown"]
    assert 'up{job=~"casestream-.*"}' in down["expr"]


@pytest.mark.parametrize(("value", "message"), [
    ("", "prometheusRule.runbookBaseUrl is required"),
    ("docs/runbook.md", "prometheusRule.runbookBaseUrl must be an http(s) URL"),
], ids=["missing", "a-path"])
def test_a_prometheus_rule_without_a_runbook_url_base_is_refused(helm: str, value: str, message: str) -> None:
    proc = _template(helm, *PRODUCTION, "--set", f"prometheusRule.runbookBaseUrl={value}")
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_kubeconform_checks_the_prometheus_rule_against_its_crd(helm: str, kubeconform: list[str]) -> None:
    manifest, _ = _rendered(helm, *PRODUCTION)
    broken = manifest.replace("      - alert: CasestreamServiceDown\n",
                              "      - alert: CasestreamServiceDown\n        severity: page\n", 1)
    assert broken != manifest
    report = _validate(kubeconform, broken)
    assert report["returncode"] != 0 and report["summary"]["invalid"] == 1, report["summary"]

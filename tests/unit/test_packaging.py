"""What the two wheels are built from: the platform (the root pyproject.toml, `casestream`) and
the regulator suite (services/pyproject.toml, `casestream-suite`) each list every package on
disk that they ship; the platform ships no suite package and registers no entry point; the
suite ships its schemas and migrations as package resources and registers what the platform
discovers; a service without migrations refuses to start."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from casestream.errors import ConfigError
from casestream.http import IDEMPOTENCY_MIGRATIONS
from casestream.outbox import OUTBOX_MIGRATIONS
from casestream.service import service_migrations
from services import schemas_dir

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PLATFORM = tomllib.loads((REPO / "pyproject.toml").read_text())
SUITE = tomllib.loads((REPO / "services" / "pyproject.toml").read_text())
SERVICES = ("audit", "case", "decision", "notification", "saga")
_SKIP = {"build", "dist", "__pycache__"}


def _on_disk(project: Path, setuptools: dict) -> set[str]:
    """Every package under the folders ``package-dir`` maps (relative to ``project``)."""
    found = set()
    for name, folder in setuptools["package-dir"].items():
        root = (project / folder).resolve()
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            if _SKIP & set(rel.parts) or any(p.endswith(".egg-info") for p in rel.parts):
                continue
            dotted = ".".join([name, *rel.parts])
            # a folder mapped to a package of its own (services.schemas) is not also a subpackage
            if not any(other != name and (project / f).resolve() == init.parent
                       for other, f in setuptools["package-dir"].items()):
                found.add(dotted)
            elif rel.parts == ():
                found.add(dotted)
    return found


@pytest.mark.parametrize("project", [REPO, REPO / "services"], ids=["platform", "suite"])
def test_every_package_on_disk_is_listed_in_its_pyproject(project: Path) -> None:
    setuptools = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, on_disk = set(setuptools["packages"]), _on_disk(project, setuptools)
    where = project.relative_to(REPO) / "pyproject.toml"
    missing = sorted(on_disk - listed)
    assert not missing, f"add to [tool.setuptools] packages in {where}: {missing}"
    gone = sorted(listed - on_disk)
    assert not gone, f"listed in {where} but not on disk: {gone}"


def test_the_platform_ships_no_suite() -> None:
    assert PLATFORM["project"]["name"] == "casestream"
    packages = PLATFORM["tool"]["setuptools"]["packages"]
    assert all(p == "casestream" or p.startswith("casestream.") for p in packages), packages
    assert set(PLATFORM["tool"]["setuptools"]["package-dir"]) == {"casestream"}
    assert "entry-points" not in PLATFORM["project"], "the platform registers no service, projection, command or schemas"
    assert PLATFORM["project"]["scripts"] == {"casestream": "casestream.cli:main"}


def test_the_suite_is_a_distribution_on_the_platform() -> None:
    project = SUITE["project"]
    assert project["name"] == "casestream-suite"
    assert project["version"] == PLATFORM["project"]["version"]
    assert project["dependencies"] == ["casestream[service]"]
    assert set(SUITE["tool"]["setuptools"]["package-dir"]) == {"services", "services.schemas"}
    entry = project["entry-points"]
    assert sorted(entry["casestream.services"]) == sorted(SERVICES)
    assert entry["casestream.schemas"] == {"suite": "services:schemas_dir"}
    assert set(entry) == {"casestream.services", "casestream.projections", "casestream.commands",
                          "casestream.schemas"}


def test_the_catalog_resolves_through_the_resource_package() -> None:
    assert schemas_dir() == (REPO / "schemas").resolve()
    assert (schemas_dir() / "catalog.toml").is_file()


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_has_migrations_shipped_as_package_data(service: str) -> None:
    folder = REPO / "services" / service / "migrations"
    assert sorted(folder.glob("*.sql"))
    assert "migrations/*.sql" in SUITE["tool"]["setuptools"]["package-data"]["*"]


def test_service_migrations_are_the_outbox_then_the_folder_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "case" / "migrations"
    folder.mkdir(parents=True)
    for name in ("002_b.sql", "001_a.sql"):
        (folder / name).write_text("SELECT 1;")
    assert service_migrations(folder) == [*OUTBOX_MIGRATIONS, *IDEMPOTENCY_MIGRATIONS,
                                         folder / "001_a.sql", folder / "002_b.sql"]
    assert service_migrations(folder, outbox=False) == [folder / "001_a.sql", folder / "002_b.sql"]


def test_a_missing_migrations_folder_is_one_config_error_naming_service_and_path(tmp_path: Path) -> None:
    folder = tmp_path / "case" / "migrations"
    with pytest.raises(ConfigError) as e:
        service_migrations(folder)
    assert str(e.value).startswith(f"case migrations folder {folder} not found")
    assert "\n" not in str(e.value)


def test_a_migrations_folder_without_sql_files_is_a_config_error(tmp_path: Path) -> None:
    folder = tmp_path / "audit" / "migrations"
    folder.mkdir(parents=True)
    (folder / "README").write_text("no sql here")
    with pytest.raises(ConfigError, match="audit migrations folder"):
        service_migrations(folder, outbox=False)

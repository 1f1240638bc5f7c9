"""What the wheel is built from: the explicit package list of pyproject.toml, the suite's
schemas and migrations as package resources, and a service without migrations refusing to start."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from casestream.errors import ConfigError
from casestream.outbox import OUTBOX_MIGRATIONS
from casestream.service import service_migrations
from services import schemas_dir

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
SERVICES = ("audit", "case", "decision", "notification", "saga")


def _on_disk() -> set[str]:
    found = set()
    for name, folder in SETUPTOOLS["package-dir"].items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found.add(".".join([name, *rel.parts]))
    for init in (REPO / "services").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(REPO).parts))
    return found


def test_every_package_on_disk_is_listed_in_pyproject() -> None:
    listed = set(SETUPTOOLS["packages"])
    missing = sorted(_on_disk() - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    gone = sorted(listed - _on_disk())
    assert not gone, f"listed in pyproject.toml but not on disk: {gone}"


def test_the_catalog_resolves_through_the_resource_package() -> None:
    assert schemas_dir() == (REPO / "schemas").resolve()
    assert (schemas_dir() / "catalog.toml").is_file()


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_has_migrations_shipped_as_package_data(service: str) -> None:
    folder = REPO / "services" / service / "migrations"
    assert sorted(folder.glob("*.sql"))
    assert "migrations/*.sql" in SETUPTOOLS["package-data"]["*"]


def test_service_migrations_are_the_outbox_then_the_folder_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "case" / "migrations"
    folder.mkdir(parents=True)
    for name in ("002_b.sql", "001_a.sql"):
        (folder / name).write_text("SELECT 1;")
    assert service_migrations(folder) == [*OUTBOX_MIGRATIONS, folder / "001_a.sql", folder / "002_b.sql"]
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

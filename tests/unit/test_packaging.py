"""What the wheels are built from: the platform (the root pyproject.toml, `casestream`), the
regulator suite's event contracts (schemas/pyproject.toml, `casestream-suite-schemas`) and the
suite (services/pyproject.toml, `casestream-suite`) each list every package on disk that they
ship; the platform ships no suite package and registers no entry point; the contracts ship the
schemas folder and the upcasters and register the `suite` schemas folder, depending on nothing
of the suite; the suite depends on them and ships its migrations as package resources and
registers what the platform discovers; a service without migrations refuses to start."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from casestream.errors import ConfigError
from casestream.http import IDEMPOTENCY_MIGRATIONS
from casestream.outbox import OUTBOX_MIGRATIONS
from casestream.service import service_migrations
from casestream_suite_schemas import schemas_dir

REPO = Path(__file__).resolve().parents[2]
PLATFORM = tomllib.loads((REPO / "pyproject.toml").read_text())
SUITE = tomllib.loads((REPO / "services" / "pyproject.toml").read_text())
CONTRACTS = tomllib.loads((REPO / "schemas" / "pyproject.toml").read_text())
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


@pytest.mark.parametrize("project", [REPO, REPO / "schemas", REPO / "services"],
                         ids=["platform", "contracts", "suite"])
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
    assert project["dependencies"] == ["casestream[service]", CONTRACTS["project"]["name"]]
    assert set(SUITE["tool"]["setuptools"]["package-dir"]) == {"services"}
    entry = project["entry-points"]
    assert sorted(entry["casestream.services"]) == sorted(SERVICES)
    # the schemas folder comes from the contracts distribution, never from the services'
    assert set(entry) == {"casestream.services", "casestream.projections", "casestream.commands"}
    assert "package-data" not in SUITE["tool"]["setuptools"] or \
        set(SUITE["tool"]["setuptools"]["package-data"]) == {"*"}


def test_the_contracts_are_a_distribution_on_the_base_platform() -> None:
    project = CONTRACTS["project"]
    assert project["name"] == "casestream-suite-schemas"
    assert project["version"] == PLATFORM["project"]["version"]
    assert project["dependencies"] == ["casestream"], "the base install: the gate needs no service extra"
    assert CONTRACTS["tool"]["setuptools"]["package-dir"] == {"casestream_suite_schemas": "."}
    assert project["entry-points"] == {"casestream.schemas": {"suite": "casestream_suite_schemas:schemas_dir"}}


def test_the_contracts_ship_every_schema_file_as_package_data() -> None:
    globs = CONTRACTS["tool"]["setuptools"]["package-data"]["casestream_suite_schemas"]
    root = REPO / "schemas"
    files = [p.relative_to(root) for p in root.rglob("*") if p.suffix in (".avsc", ".toml")
             and p.name != "pyproject.toml" and not any(part.endswith(".egg-info") for part in p.parts)]
    assert files
    unshipped = [str(f) for f in files if not any(f.match(g) and len(f.parts) == len(Path(g).parts) for g in globs)]
    assert not unshipped, f"add to package-data in schemas/pyproject.toml: {unshipped}"


def test_the_catalog_names_upcasters_inside_the_contracts_package() -> None:
    catalog = tomllib.loads((REPO / "schemas" / "catalog.toml").read_text())
    module = catalog["catalog"]["upcasters"].split(":")[0]
    assert module.split(".")[0] == "casestream_suite_schemas", module
    assert (REPO / "schemas" / (module.split(".", 1)[1] + ".py")).is_file()


def test_the_entry_point_names_the_schemas_folder_function() -> None:
    """The entry point's function is the one in schemas/__init__.py, and it answers the folder
    the checkout's schemas/ (an editable install) with its catalog."""
    from importlib.metadata import entry_points

    (point,) = [e for e in entry_points(group="casestream.schemas") if e.name == "suite"]
    function = point.load()
    assert function is schemas_dir
    assert Path(function.__code__.co_filename).resolve() == (REPO / "schemas" / "__init__.py").resolve()
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

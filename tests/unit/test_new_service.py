"""``casestream new service``: names validated like a ServiceSpec's (one line, exit 2), a
non-empty target refused unless ``--force``, the skeleton's files rendered completely and
shipped as package data. Running the skeleton's own tests is
``tests/integration/test_new_service_skeleton.py``."""

from __future__ import annotations

import ast
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from casestream.cli import main
from casestream.errors import ConfigError
from casestream.events import ENVELOPE_FIELDS
from casestream.scaffold import TEMPLATE_SUFFIX, service_scaffold, write_service

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "shared" / "casestream" / "scaffold" / "templates"


def new(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["new", "service", *args])
    return result.exit_code, result.output


class TestValidation:
    @pytest.mark.parametrize("name", ["Orders", "1orders", "or-ders", "o" * 32, ""])
    def test_a_bad_service_name_is_one_line_exit_2(self, tmp_path: Path, name: str) -> None:
        code, out = new(name, "--directory", str(tmp_path / "x"))
        assert code == 2, out
        assert out.strip() == (f"Error: service name {name!r}: lowercase letters, digits and _, "
                               "starting with a letter, at most 31 characters")
        assert not (tmp_path / "x").exists()

    @pytest.mark.parametrize("package", ["json", "services", "casestream", "class", "My-Pkg"])
    def test_a_bad_package_is_one_line_naming_it(self, tmp_path: Path, package: str) -> None:
        code, out = new("orders", "--package", package, "--directory", str(tmp_path / "x"))
        assert code == 2, out
        assert out.startswith(f"Error: package {package!r}: ") and out.count("\n") == 1

    def test_a_bad_namespace_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"^namespace 'acme\.': "):
            service_scaffold("orders", namespace="acme.")

    def test_names_derived_from_the_service_name(self) -> None:
        s = service_scaffold("food_safety")
        assert (s.package, s.namespace, s.dist, s.event, s.settings_class, s.env_prefix) == (
            "food_safety", "food_safety", "food-safety", "FoodSafetyCreated",
            "FoodSafetySettings", "CASESTREAM_FOOD_SAFETY_")
        assert 18200 <= s.port < 18900 and s.port == service_scaffold("food_safety").port
        assert service_scaffold("orders", package="acme_orders", namespace="acme").namespace == "acme"


class TestTarget:
    def test_a_non_empty_folder_is_refused_unless_force(self, tmp_path: Path) -> None:
        (tmp_path / "notes.txt").write_text("mine")
        code, out = new("orders", "--directory", str(tmp_path))
        assert code == 2 and out.strip() == (f"Error: target {tmp_path} is not empty (pass "
                                             "--force to write into it)")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
        (tmp_path / "pyproject.toml").write_text("old")
        code, out = new("orders", "--directory", str(tmp_path), "--force")
        assert code == 0, out
        assert (tmp_path / "notes.txt").read_text() == "mine"
        assert 'name = "orders"' in (tmp_path / "pyproject.toml").read_text()

    def test_a_file_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "f").write_text("")
        code, out = new("orders", "--directory", str(tmp_path / "f"), "--force")
        assert code == 2 and out.strip() == f"Error: target {tmp_path / 'f'} is a file, not a folder"

    def test_it_prints_the_next_steps(self, tmp_path: Path) -> None:
        code, out = new("orders", "--directory", str(tmp_path / "orders"))
        assert code == 0, out
        for step in ("pip install -e '.[test]'", "casestream schemas check --schemas-dir schemas",
                     "  pytest", "casestream settings orders", "casestream topics apply",
                     "casestream migrate orders", "python -m orders"):
            assert step in out


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("skeleton") / "orders"
    write_service(service_scaffold("orders", package="acme_orders", namespace="acme"), root)
    return root


class TestSkeleton:
    def test_the_layout(self, tree: Path) -> None:
        files = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}
        assert {"pyproject.toml", "README.md", "schemas/catalog.toml", "schemas/envelope.avsc",
                "schemas/orders/OrdersCreated.v1.avsc", "acme_orders/__init__.py",
                "acme_orders/settings.py", "acme_orders/bootstrap.py", "acme_orders/upcasters.py",
                "acme_orders/migrations/001_items.sql", "acme_orders/adapters/http.py",
                "acme_orders/adapters/projection.py", "acme_orders/domain/model.py",
                "acme_orders/application/service.py", "tests/test_domain.py",
                "tests/test_application.py", "tests/test_schemas.py"} <= files
        assert not [f for f in files if f.endswith(TEMPLATE_SUFFIX) or "__" in f.replace(
            "__init__", "").replace("__main__", "")]

    def test_every_placeholder_is_filled_and_every_module_parses(self, tree: Path) -> None:
        for path in tree.rglob("*"):
            if path.is_file():
                text = path.read_text()
                assert "${" not in text, path
                if path.suffix == ".py":
                    ast.parse(text, str(path))
                elif path.suffix == ".avsc":
                    json.loads(text)
                elif path.suffix == ".toml":
                    tomllib.loads(text)

    def test_it_imports_neither_the_suite_nor_casestream_modules(self, tree: Path) -> None:
        for path in tree.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    assert name.partition(".")[0] != "services", f"{path}: imports {name}"
                    assert name.count(".") <= 1 or not name.startswith("casestream."), \
                        f"{path}: {name} is a module, import from its package"

    def test_the_entry_points_name_the_service_schemas_and_projection(self, tree: Path) -> None:
        project = tomllib.loads((tree / "pyproject.toml").read_text())["project"]
        assert project["name"] == "orders" and project["dependencies"] == ["casestream[service]"]
        assert project["entry-points"] == {
            "casestream.services": {"orders": "acme_orders:SERVICE"},
            "casestream.schemas": {"orders": "acme_orders:schemas_dir"},
            "casestream.projections": {"orders.items": "acme_orders.adapters.projection:PROJECTION"}}

    def test_the_envelope_has_the_platforms_fields(self, tree: Path) -> None:
        envelope = json.loads((tree / "schemas" / "envelope.avsc").read_text())
        assert (*(f["name"] for f in envelope["fields"]), "payload") == ENVELOPE_FIELDS
        assert envelope["namespace"] == "acme"
        catalog = tomllib.loads((tree / "schemas" / "catalog.toml").read_text())
        assert catalog["catalog"] == {"envelope": "envelope.avsc", "namespace": "acme",
                                      "upcasters": "acme_orders.upcasters:chain"}
        assert list(catalog["subjects"]) == ["acme.orders.OrdersCreated"]


def test_the_templates_are_package_data_of_the_platform() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "casestream.scaffold" in setuptools["packages"]
    globs = setuptools["package-data"]["casestream.scaffold"]
    root = TEMPLATES.parent
    shipped = {p for g in globs for p in root.glob(g)}
    on_disk = {p for p in TEMPLATES.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert on_disk and on_disk == shipped
    assert not [p for p in on_disk if p.suffix != TEMPLATE_SUFFIX]

"""The schema-compatibility gate (``casestream schemas check``): a tool teams run in CI.

Public API::

    check_repository(config_or_path, *, root=".", python_path=(), subjects=None, against=None, registry=None,
                     ignore=()) -> Report
    check_catalog(schemas_dir, *, subjects=None, against=None, registry=None, ignore=()) -> Report
    load_config(path) -> GateConfig            casestream-schemas.toml / pyproject [tool.casestream.schemas]
    check_pair(reader, writer, *, reader_is_new=True, labels=("reader", "writer")) -> list[Issue]
    check_history(schemas, level, *, labels=None, new=None) -> [(PairCheck, [Issue])]
    lint_schema(schema_json, *, path="", require_namespace=True) -> list[Issue]
    parse_avro(schema, *, references=()) -> avro.schema.Schema
    render(report, fmt) / render_error(error, fmt)   fmt: text, json, github, junit, sarif
    RULES: rule id -> Rule(id, title, source, hint, stricter)
    RegistryOptions(url, basic_auth, bearer_token, ca_file, cert_file, key_file)

Modules: ``config`` (the repository configuration), ``layout`` (configuration -> subjects and
versions), ``lint`` (single schema), ``compat`` (pairs, levels), ``runner`` (the run),
``history`` (``--against`` git ref), ``remote`` (``--registry``), ``render``, ``rules``, ``model``.
casestream's own ``catalog.toml`` layout is one configuration (``[[catalogs]]``) of the same gate.
Exit codes: 0 compatible, 1 incompatible, 2 bad input (:class:`CheckInputError`).
"""

from casestream.schemacheck.compat import LEVELS, check_history, check_pair, pairs_for_level, parse_avro
from casestream.schemacheck.config import CONFIG_FILE, NAMING_STRATEGIES, GateConfig, load_config
from casestream.schemacheck.lint import Issue, lint_schema
from casestream.schemacheck.model import EXIT_INCOMPATIBLE, EXIT_INPUT, EXIT_OK, CheckInputError, Finding, Report
from casestream.schemacheck.remote import RegistryOptions
from casestream.schemacheck.render import FORMATS, render, render_error
from casestream.schemacheck.rules import RULES, Rule
from casestream.schemacheck.runner import check_catalog, check_repository

__all__ = [
    "CONFIG_FILE",
    "EXIT_INCOMPATIBLE",
    "EXIT_INPUT",
    "EXIT_OK",
    "FORMATS",
    "LEVELS",
    "NAMING_STRATEGIES",
    "RULES",
    "CheckInputError",
    "Finding",
    "GateConfig",
    "Issue",
    "RegistryOptions",
    "Report",
    "Rule",
    "check_catalog",
    "check_history",
    "check_pair",
    "check_repository",
    "lint_schema",
    "load_config",
    "pairs_for_level",
    "parse_avro",
    "render",
    "render_error",
]

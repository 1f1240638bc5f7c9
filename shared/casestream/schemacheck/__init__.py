"""The schema-compatibility check (``casestream schemas check``): a tool teams run in CI.

Public API::

    check_catalog(schemas_dir, *, subjects=None, against=None, registry=None) -> Report
    check_pair(reader, writer, *, reader_is_new=True, labels=("reader", "writer")) -> list[Issue]
    lint_schema(schema_json, *, path="", require_namespace=True) -> list[Issue]
    parse_avro(schema) -> avro.schema.Schema
    render(report, fmt="text"|"json"|"github") -> str
    RULES: rule id -> Rule(title, source, hint)

Modules: ``lint`` (single schema), ``compat`` (pairs, levels), ``runner`` (catalog),
``history`` (``--against`` git ref), ``remote`` (``--registry``), ``render``, ``rules``, ``model``.
Exit codes: 0 compatible, 1 incompatible, 2 bad input (:class:`CheckInputError`).
"""

from casestream.schemacheck.compat import LEVELS, check_history, check_pair, pairs_for_level, parse_avro
from casestream.schemacheck.lint import Issue, lint_schema
from casestream.schemacheck.model import EXIT_INCOMPATIBLE, EXIT_INPUT, EXIT_OK, CheckInputError, Finding, Report
from casestream.schemacheck.render import FORMATS, render
from casestream.schemacheck.rules import RULES, Rule
from casestream.schemacheck.runner import check_catalog

__all__ = [
    "EXIT_INCOMPATIBLE",
    "EXIT_INPUT",
    "EXIT_OK",
    "FORMATS",
    "LEVELS",
    "RULES",
    "CheckInputError",
    "Finding",
    "Issue",
    "Report",
    "Rule",
    "check_catalog",
    "check_history",
    "check_pair",
    "lint_schema",
    "pairs_for_level",
    "parse_avro",
    "render",
]

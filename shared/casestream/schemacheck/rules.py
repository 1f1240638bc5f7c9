"""The rules of the schema check: id -> what it catches, where the rule comes from, the fix.

Pure data. Sources:
  [spec]      Apache Avro 1.12 specification (avro.apache.org/docs/1.12.0/specification),
              sections "Schema Resolution", "Names", "Aliases", "Enums", "Unions", "Logical Types".
  [confluent] Confluent Schema Registry, "Schema Evolution and Compatibility"
              (docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html).
  [avro-py]   verdict of ``avro.compatibility.ReaderWriterCompatibilityChecker`` (Apache avro >= 1.11).
  [casestream] this project's catalog conventions (schemas/catalog.toml header).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RULES", "Rule", "hint_for"]


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule: ``id``, one-line ``title``, ``source`` tag, the default fix ``hint``, and for a
    rule stricter than Apache Avro's ``SchemaCompatibility`` verdict the reason it is kept
    (``stricter``; empty: the rule reports what Avro itself rejects). Any rule is waived per
    subject with ``ignore = ["RULE"]`` in the subject's configuration or ``--ignore RULE:SUBJECT``.
    """

    id: str
    title: str
    source: str
    hint: str
    stricter: str = ""


_ALL = [
    # --- pairs (reader/writer), from the Avro resolution rules --------------------------------
    Rule("reader-field-missing-default", "a field the reader expects is not written and has no default",
         "[spec] Schema Resolution: records; [avro-py] reader_field_missing_default_value",
         "give the field a default (for optional data: type [\"null\", ...] with default null)"),
    Rule("field-removed-without-default", "a field was removed that readers of the earlier version need",
         "[spec] Schema Resolution: records; [confluent] FORWARD",
         "only remove fields that have a default in every version readers still use; or use a BACKWARD mode"),
    Rule("field-renamed-without-alias", "a field was renamed without an alias for its old name",
         "[spec] Aliases; [avro-py] reader_field_missing_default_value",
         "add \"aliases\": [\"<old name>\"] to the renamed field (BACKWARD); FORWARD also needs a default"),
    Rule("type-mismatch", "a field's type changed in a way Avro cannot promote",
         "[spec] Schema Resolution: promotions int->long->float->double, string<->bytes; [avro-py] type_mismatch",
         "keep the type (or widen it: int->long->float->double); add a new field for a new type"),
    Rule("name-mismatch", "a record, enum or fixed changed its name",
         "[spec] Schema Resolution: names must match (or reader aliases); [avro-py] name_mismatch",
         "keep the full name, or add the old full name to the type's \"aliases\""),
    Rule("fixed-size-mismatch", "a fixed changed its size", "[spec] Schema Resolution: fixed; [avro-py] fixed_size_mismatch",
         "keep the size; add a new field for a new size"),
    Rule("missing-union-branch", "the reader's union lacks a branch the writer may write",
         "[spec] Schema Resolution: unions; [avro-py] missing_union_branch",
         "keep every union branch that the other version may write"),
    Rule("enum-symbol-added-without-default", "the writer has enum symbols the reader lacks and the reader's enum has no default",
         "[spec] Enums (default) and Schema Resolution: enums; [avro-py] missing_enum_symbols",
         "declare an enum \"default\" symbol in a version first; add new symbols only in a later version"),
    Rule("enum-symbol-removed", "a symbol was removed from an enum that has no default in the new version",
         "[spec] Schema Resolution: enums; [avro-py] missing_enum_symbols",
         "keep the symbol, or give the enum a \"default\" so old data with that symbol still reads"),
    Rule("logical-type-changed", "a logical type changed on the same underlying type (e.g. timestamp-millis -> timestamp-micros)",
         "[spec] Logical Types (the binary stays readable, the meaning changes); not checked by [avro-py] nor [confluent]",
         "keep the logical type; add a new field for the new unit/meaning",
         stricter='the bytes still decode, but the value means something else (1000x for millis -> micros; days -> ms for date -> timestamp-millis): readers silently misread'),
    Rule("bytes-read-as-string", "a reader reads as string what a writer writes as bytes",
         "[spec] Schema Resolution: promotions (bytes is promotable to string)",
         "keep bytes (or string) on both sides; add a new field for the other type",
         stricter="the promotion decodes the bytes as UTF-8: bytes that are not UTF-8 fail to decode (fastavro) "
                  "(fastavro raises UnicodeDecodeError)"),
    Rule("incompatible", "the Avro checker found the pair incompatible", "[avro-py]",
         "see the message; compare the two versions field by field"),
    # --- single schema -----------------------------------------------------------------------
    Rule("name-not-qualified", "a named type has no namespace, or a type reference is not a full name",
         "[spec] Names",
         "declare a \"namespace\" (e.g. \"com.acme.orders\") on the top-level type and reference named types by full name",
         stricter='an unqualified name resolves against whatever namespace encloses it, so moving a type or reusing it from another file changes its full name'),
    Rule("payload-name", "the payload record is not named casestream.<aggregate>.<EventType>Payload", "[casestream]",
         "name the payload record <EventType>Payload in namespace casestream.<aggregate_type>",
         stricter='casestream composes <subject> = envelope + payload; the codec finds the payload record by this name'),
    Rule("enum-default-not-symbol", "an enum default (or a field default of enum type) is not one of its symbols",
         "[spec] Enums: default must be one of the symbols",
         "use one of the enum's symbols as default"),
    Rule("union-default-not-first-branch", "a union field's default does not match the union's first branch",
         "[spec] Unions / Complex Types: the default of a union corresponds to its first schema; registries reject it",
         "reorder the union so the default's type comes first (e.g. [\"null\", \"string\"] with default null)"),
    Rule("invalid-default", "a field default does not match the field's type", "[spec] Complex Types: records (default)",
         "make the default a value of the field's type (JSON encoding per the spec's table)",
         stricter='Apache Avro for Java accepts any JSON string as a bytes/fixed default; the specification says its code points 0-255 are the bytes'),
    Rule("upcaster-missing", "a version has no upcaster from the version before it",
         "[casestream] consumers read every event as the newest version (casestream.events.upcasting;"
         " UpcasterChain.verify refuses to start a service without the step)",
         "register a step in the chain `upcasters` names (casestream-schemas.toml, or [catalog] in a catalog.toml):"
         " @chain.register(\"<EventType>\", <N>) turning a vN payload into vN+1 (defaults for added fields, renames)",
         stricter='a repository that declares an upcaster chain reads every event as the newest version; without the step services refuse to start'),
    Rule("upcaster-target-missing", "an event upcaster renames or splits a type into a type or version the repository does not have",
         "[casestream] UpcasterChain.add_event(..., produces=[(type, version)]): each result must be a declared version"
         " of the catalog (UpcasterChain.verify refuses to start a service otherwise)",
         "add the produced type's subject (or its missing version file), or correct produces=[...] of the step",
         stricter='a consumer reads the renamed events as the produced type and version; without its schema services refuse to start'),
    Rule("upcaster-rename-incomplete", "a type renamed by an event upcaster has a newer version that no step lifts into the new type",
         "[casestream] an event step that does not produce its own type ends that type's history: newer versions"
         " must be upcast into the rename target too",
         "add an event step for the newer version producing the rename target (chain.add_event(\"<OldType>\", <N>, fn,"
         " produces=[(\"<NewType>\", <M>)])), or write the new type instead of a new version of the old one",
         stricter='events written as the newer version stay the old type: handlers of the rename target never see them'),
    # --- history ----------------------------------------------------------------------------
    Rule("published-version-changed", "a published version file (or the envelope) changed",
         "[casestream] published versions are immutable; the registry already has the old text",
         "revert the change and add the change as a new version instead (the next file of the subject's pattern or files list)",
         stricter='the registry already holds the old text under the same version: the file no longer describes the data written with it'),
    Rule("published-version-removed", "a published version or subject was removed from the catalog",
         "[casestream] published versions are immutable",
         "restore it: consumers may still read events written with it",
         stricter='consumers may still read events written with the removed version'),
    Rule("registry-version-unknown", "the registry holds a version of the subject that no version file matches",
         "[casestream] schemas/ is the source of truth",
         "restore the edited version file, or find out who registered this schema by hand",
         stricter='the files are the source of truth; a registered version no file matches was edited or registered by hand'),
    Rule("compatibility-level-mismatch", "the registry enforces another compatibility level than the catalog names",
         "[confluent] subject-level compatibility (PUT /config/{subject})",
         "set the configured level on the registry (PUT <registry>/config/<subject> {\"compatibility\": \"<LEVEL>\"};"
         " `casestream schemas register` does it for a catalog.toml layout), or configure the registry's level",
         stricter='the registry would accept versions the configuration forbids, or refuse ones it allows'),
]

#: Every rule by id.
RULES: dict[str, Rule] = {r.id: r for r in _ALL}


def hint_for(rule_id: str) -> str:
    """Default fix hint of ``rule_id`` (empty for an unknown id)."""
    r = RULES.get(rule_id)
    return r.hint if r else ""

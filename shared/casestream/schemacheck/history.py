"""Published versions are immutable: compare the working tree with a git ref (``--against``).

The configuration file is read again at the ref (:class:`GitTree`); every version of every subject
there must still exist, and every file it was made from must be unchanged: parsed JSON
equality, so whitespace, indentation and the order of a JSON object's attributes do not count,
while any change of fields (their order too: it is the binary layout), defaults, docs or names
does (the registry already holds the old text). A version whose files moved is compared by
its schema as checked, in canonical form. No configuration (or catalog) at the ref: nothing was
published, no findings. Findings carry a unified diff.

In a shallow clone a ``<remote>/<branch>`` ref that is not there is fetched once
(``git fetch --no-tags --depth=1 <remote> <branch>``); when that fails, or for another ref, the
error says which ``git fetch`` to run. Uses the ``git`` command line; a missing git, a path
outside a repository, or an unknown ref is a :class:`CheckInputError` (exit 2).
"""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

from casestream.schemacheck.compat import canonical
from casestream.schemacheck.config import config_from_text
from casestream.schemacheck.layout import Layout, Tree, WorkTree, build_layout
from casestream.schemacheck.model import CheckInputError, Finding, finding_for

__all__ = ["GitTree", "compare_to_ref", "resolve_ref"]


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)
    except FileNotFoundError as e:
        raise CheckInputError("git is not installed", target="git") from e
    except subprocess.TimeoutExpired as e:
        raise CheckInputError(f"git {' '.join(args)} timed out", target=str(cwd)) from e
    if check and proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        raise CheckInputError(err[-1] if err else "git failed", target=f"git {' '.join(args)}")
    return proc


def _exists(cwd: Path, ref: str) -> bool:
    return _git(cwd, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).returncode == 0


def resolve_ref(cwd: Path, ref: str) -> str:
    """The commit of ``ref``; in a shallow clone fetches a missing ``<remote>/<branch>`` once.

    Raises:
        CheckInputError: the ref is unknown; the message names the ``git fetch`` to run.
    """
    if not _exists(cwd, ref):
        remotes = _git(cwd, "remote").stdout.split()
        remote, _, branch = ref.partition("/")
        shallow = _git(cwd, "rev-parse", "--is-shallow-repository", check=False).stdout.strip() == "true"
        if remote in remotes and branch:
            fetch = ["fetch", "--no-tags", "--depth=1", remote, f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"]
            done = _git(cwd, *fetch, check=False)
            if done.returncode != 0 or not _exists(cwd, ref):
                raise CheckInputError(
                    f"unknown git ref {ref!r} and fetching it failed; run: git {' '.join(fetch)}", target=str(cwd))
        else:
            how = "git fetch --unshallow" if shallow else f"git fetch origin {ref}"
            where = " (this is a shallow clone)" if shallow else ""
            raise CheckInputError(f"unknown git ref {ref!r}{where}; run: {how} (or check the name)",
                                  target=str(cwd))
    return _git(cwd, "rev-parse", f"{ref}^{{commit}}").stdout.strip()


class GitTree(Tree):
    """The files of ``folder`` (inside a git work tree) as they are at commit ``ref``."""

    def __init__(self, folder: Path, ref: str):
        self.folder = folder
        self.ref = ref
        _git(folder, "rev-parse", "--show-toplevel")
        self.prefix = _git(folder, "rev-parse", "--show-prefix").stdout.strip()
        listing = _git(folder, "ls-tree", "-r", "--name-only", "--full-tree", ref, "--",
                       self.prefix or ".").stdout
        self._files = sorted(line[len(self.prefix):] for line in listing.splitlines()
                             if line.startswith(self.prefix))
        self._present = set(self._files)

    def read(self, rel: str) -> str | None:
        if rel not in self._present:
            return None
        return _git(self.folder, "show", f"{self.ref}:{self.prefix}{rel}").stdout

    def files(self, under: str = "") -> list[str]:
        prefix = under.strip("/") + "/" if under.strip("/") else ""
        return [f for f in self._files if f.endswith(".avsc") and f.startswith(prefix)]


def _diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), old_name, new_name))


def _same(a: str, b: str) -> bool:
    try:
        return bool(canonical(json.loads(a)) == canonical(json.loads(b)))
    except json.JSONDecodeError:
        return a == b


def compare_to_ref(layout: Layout, tree: Tree, ref: str, *, subjects: list[str] | None = None) -> list[Finding]:
    """Findings for versions published at ``ref`` that changed or disappeared in ``layout``.

    Args:
        layout: the working tree's layout; its configuration is read again at ``ref``.
        tree: the :class:`~casestream.schemacheck.layout.WorkTree` it was read from.
        ref: any git revision (``origin/main``, a tag, a sha).
        subjects: restrict to these subjects (default all of the ref's).

    Raises:
        CheckInputError: not a git repository, unknown ref, a layout at the ref that does not load.
    """
    if not isinstance(tree, WorkTree) or layout.config is None:
        raise CheckInputError("--against compares a work tree")
    folder = tree.root.resolve()
    commit = resolve_ref(folder, ref)
    at_ref = GitTree(folder, commit)
    config = layout.config
    if config.file:  # the configuration as it was at the ref (folders may have moved since)
        text = at_ref.read(config.file)
        if text is None:
            return []  # no configuration at the ref: nothing was published
        try:
            config = config_from_text(text, name=config.file, origin=f"{ref}:{config.file}", base=config.base)
        except CheckInputError as e:
            if "no [tool.casestream.schemas] table" in str(e):
                return []  # pyproject.toml without the gate's table at the ref: nothing was published
            raise CheckInputError(f"the configuration at {ref} does not load: {e}", target=ref) from e
    elif all(at_ref.read("catalog.toml" if c == "." else f"{c}/catalog.toml") is None for c in config.catalogs):
        return []  # no catalog at the ref: nothing was published
    try:
        old = build_layout(config, at_ref)
    except CheckInputError as e:
        raise CheckInputError(f"schemas at {ref} do not load: {e}", target=ref) from e
    findings: list[Finding] = []
    reported: set[str] = set()
    wanted = set(subjects) if subjects is not None else None
    for name, before in old.subjects.items():
        if wanted is not None and name not in wanted and name in layout.subjects:
            continue
        now = layout.subjects.get(name)
        for i, v in enumerate(before.versions):
            after = now.versions[i] if now is not None and i < len(now.versions) else None
            if after is None:
                findings.append(finding_for(
                    "published-version-removed", subject=name, versions=v.label, path="",
                    message=f"{name} {v.label} was published at {ref} ({v.file}) and is gone", file=v.file))
                continue
            if not all(file in after.sources for file in v.sources):
                # moved or renamed files: compare the schema as checked (canonical form)
                if canonical(v.schema) != canonical(after.schema):
                    old_text, new_text = (json.dumps(x, indent=2) + "\n" for x in (v.schema, after.schema))
                    findings.append(finding_for(
                        "published-version-changed", subject=name, versions=v.label, path="",
                        message=f"{name} {v.label} ({v.file} at {ref}, now {after.file}) changed; "
                                f"published versions are immutable",
                        file=after.file, text=after.text,
                        diff=_diff(old_text, new_text, f"{ref}:{v.file}", after.file)))
                continue
            for file, text in v.sources.items():
                rel = layout.config.unrel(file)
                current = after.sources.get(file)
                if current is not None and _same(text, current):
                    continue
                if file in reported:
                    continue
                reported.add(file)
                shared = file != v.file
                findings.append(finding_for(
                    "published-version-changed", subject="" if shared else name, versions=v.label if not shared
                    else "", path="",
                    message=(f"{file} changed since {ref}; it is part of every published version that uses it"
                             if shared else f"{file} changed since {ref}; published versions are immutable"),
                    file=file, text=current or "", diff=_diff(text, current or "", f"{ref}:{rel}", rel)))
    return findings

"""Every module of the shared library imports on its own, in a fresh interpreter.

A circular import (e.g. casestream.consumer.deadletters -> casestream.consumer -> ... -> casestream.consumer.deadletters)
only shows when the cycle's module is the first one a program imports, so each module is
imported first in its own process.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import casestream

MODULES = sorted(m.name for m in pkgutil.walk_packages(casestream.__path__, "casestream.")
                 if not m.name.endswith("__main__"))


def test_the_library_has_modules_to_check() -> None:
    assert "casestream.consumer.deadletters" in MODULES and "casestream.consumer.batch" in MODULES


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    script = ("import importlib, sys\n"
              "failed = []\n"
              "for name in sys.argv[1:]:\n"
              "    for mod in [m for m in sys.modules if m == 'casestream' or m.startswith('casestream.')]:\n"
              "        del sys.modules[mod]\n"
              "    try:\n"
              "        importlib.import_module(name)\n"
              "    except Exception as e:\n"
              "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
              "print('\\n'.join(failed))\n")
    out = subprocess.run([sys.executable, "-c", script, *MODULES], capture_output=True,
                         text=True, timeout=300, check=True)
    assert out.stdout.strip() == "", out.stdout

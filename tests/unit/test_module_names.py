"""The allow-list of module names is data: every installed CPython 3.11 is checked against it.

A Python bugfix release can add a public name to an allowed module (3.11.7 added
``enum.pickle_by_enum_name``, which hands out the builtin ``getattr``). Such a name is refused
until someone reviews it, and these tests fail until the review is written into the rules."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from gatekeeper import validate
from genesis import rules

# Prints {module: [public, non-module names]} of the allowed modules, on the interpreter running it.
LIST_NAMES = """
import importlib, json, sys, types
out = {}
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    out[name] = sorted(n for n in dir(module)
                       if not n.startswith("_") and not isinstance(getattr(module, n), types.ModuleType))
print(json.dumps({"version": sys.version.split()[0], "names": out}))
"""


def installed_pythons() -> list[str]:
    """Every CPython 3.11 this machine has (Debian's, pyenv's, the venv's), each once."""
    found = {os.path.realpath(sys.executable): sys.executable}
    candidates = [shutil.which("python3.11") or "", "/usr/bin/python3.11", "/usr/local/bin/python3.11"]
    candidates += glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3"))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            found.setdefault(os.path.realpath(path), path)
    return sorted(found.values())


def names_of(python: str) -> tuple[str, dict[str, list[str]]]:
    modules = [m for m in rules.ALLOWED_IMPORTS if m != "__future__"]
    done = subprocess.run([python, "-I", "-c", LIST_NAMES, *modules], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    return answer["version"], answer["names"]


@pytest.mark.parametrize("python", installed_pythons())
def test_every_public_name_of_an_allowed_module_is_reviewed(python: str) -> None:
    version, names = names_of(python)
    if not version.startswith("3.11."):
        pytest.skip(f"{python} is Python {version}, not the trait language")
    unreviewed = {}
    for module, public in names.items():
        reviewed = rules.ALLOWED_MODULE_NAMES[module] | set(rules.MODULE_ATTR_DENYLIST.get(module, {}))
        if missing := sorted(set(public) - reviewed):
            unreviewed[module] = missing
    assert not unreviewed, (
        f"CPython {version} ({python}) defines public names the sandbox rules neither allow nor refuse: "
        f"{unreviewed}; review each and add it to ALLOWED_MODULE_NAMES or MODULE_ATTR_DENYLIST"
    )


def test_allowed_names_exist_on_the_trait_runtime() -> None:
    """A listed name the runtime lacks is a typo, or a module that changed."""
    _version, names = names_of(sys.executable)
    for module, allowed in rules.ALLOWED_MODULE_NAMES.items():
        if module != "__future__":
            assert allowed <= set(names[module]), (module, sorted(allowed - set(names[module])))


def test_no_name_is_both_allowed_and_refused() -> None:
    for module, denied in rules.MODULE_ATTR_DENYLIST.items():
        assert not rules.ALLOWED_MODULE_NAMES[module] & set(denied), module
    assert set(rules.ALLOWED_MODULE_NAMES) == set(rules.ALLOWED_IMPORTS)


@pytest.mark.parametrize(
    "code_line, fragment",
    [
        ("from enum import pickle_by_enum_name", "hands out the builtin getattr"),
        ("from enum import pickle_by_global_name", "pickling support"),
        ("from functools import cached_property", "descriptor"),
        ("from typing import io", "deprecated namespace"),
        ("from math import not_a_function_yet", "has no public name"),
    ],
)
def test_unlisted_and_refused_names_are_refused_whatever_the_interpreter(code_line: str, fragment: str) -> None:
    code = (
        f"{code_line}\n\nclass BaseTrait:\n    pass\n\nclass T(BaseTrait):\n"
        "    async def execute(self, entity) -> None:\n        pass\n"
    )
    report = validate("probe", code)
    assert report.failure_code == "AST_IMPORT_FORBIDDEN", report
    assert fragment in report.validation_log[-1], report.validation_log


def test_attribute_use_of_an_unlisted_name_is_refused() -> None:
    code = (
        "import enum\n\nclass BaseTrait:\n    pass\n\nclass T(BaseTrait):\n"
        "    async def execute(self, entity) -> None:\n        f = enum.pickle_by_enum_name\n"
    )
    report = validate("probe", code)
    assert report.failure_code is not None and "pickle_by_enum_name" in report.validation_log[-1], report


def test_a_host_on_another_patch_level_is_refused() -> None:
    """The host's hello names its interpreter; another patch level than ours is refused."""
    import platform

    from sandbox.container import RuntimeMismatch, check_runtime

    check_runtime({"ok": True, "implementation": sys.implementation.name, "python": platform.python_version()})
    major, minor, patch = platform.python_version().split(".")
    other = f"{major}.{minor}.{int(patch) + 1}"
    with pytest.raises(RuntimeMismatch, match=f"runs cpython {other}"):
        check_runtime({"ok": True, "implementation": "cpython", "python": other})

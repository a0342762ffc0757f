"""Compiled (Cython) builds of pure-Python modules: which of the two to import.

A module named in ``COMPILED`` is plain Python (``genesis/<name>.py``, optionally typed by
``genesis/<name>.pxd``) that ``scripts/build_native.py`` (run by ``make venv``) also compiles
into ``genesis/_<name>_native.*.so``, stamped with the digest of the sources it was built from.
``load`` returns the compiled module when it is present and built from the current sources,
and otherwise logs why, once, and returns the pure module: same results, only slower.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from pathlib import Path
from types import ModuleType

log = logging.getLogger("genesis.native")

PACKAGE_DIR = Path(__file__).resolve().parent
COMPILED = ("gatekeeper_core",)


def native_name(name: str) -> str:
    """The module name of the compiled build of ``genesis.<name>``."""
    return f"_{name}_native"


def source_files(name: str) -> list[Path]:
    """The files a compiled build depends on: the module and its .pxd (when there is one)."""
    files = [PACKAGE_DIR / f"{name}.py"]
    pxd = PACKAGE_DIR / f"{name}.pxd"
    if pxd.exists():
        files.append(pxd)
    return files


def source_digest(name: str) -> str:
    digest = hashlib.sha256()
    for path in source_files(name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compiled_problem(name: str) -> str | None:
    """Why the compiled build of ``genesis.<name>`` cannot be used, or None when it can."""
    try:
        native = importlib.import_module(f"genesis.{native_name(name)}")
    except ImportError as error:
        return f"not built ({error}); run `make venv`"
    if getattr(native, "SOURCE_SHA256", None) != source_digest(name):
        return f"stale: genesis/{name}.py changed since it was built; run `make venv`"
    return None


def load(name: str) -> tuple[ModuleType, bool]:
    """The module to use for ``genesis.<name>`` and whether it is the compiled one."""
    problem = compiled_problem(name)
    if problem is None:
        return importlib.import_module(f"genesis.{native_name(name)}"), True
    log.warning("genesis.%s: using the pure-Python module, the compiled build is %s", name, problem)
    return importlib.import_module(f"genesis.{name}"), False

"""Compiled (Cython) builds of modules: which implementation to import.

A module named in ``COMPILED`` (``package.name``) is either plain Python (``<name>.py``,
optionally typed by ``<name>.pxd``: interpreted, the same module is the fallback) or Cython
source (``<name>.pyx``: the caller keeps its own fallback, e.g. numpy code). ``scripts/build_native.py``
(run by ``make venv``) compiles it into ``<package>/_<name>_native.*.so``, stamped with the
digest of the sources it was built from. ``load`` / ``compiled`` return the compiled module when
it is present and built from the current sources, and otherwise log why, once, and fall back:
same results, only slower. A bare name is a module of ``genesis``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
from pathlib import Path
from types import ModuleType

log = logging.getLogger("genesis.native")

PACKAGE_DIR = Path(__file__).resolve().parent
COMPILED = ("genesis.gatekeeper_core", "engine.grid_kernels")
SOURCE_SUFFIXES = (".py", ".pyx")


def split(name: str) -> tuple[str, str]:
    """(package, module) of ``name`` (``package.module``, or a bare module of genesis)."""
    package, _, module = name.rpartition(".")
    return package or "genesis", module


def native_name(name: str) -> str:
    """The module name (within its package) of the compiled build of ``name``."""
    return f"_{split(name)[1]}_native"


def package_dir(name: str) -> Path:
    package = split(name)[0]
    if package == "genesis":
        return PACKAGE_DIR
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"no package {package}")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def source_files(name: str) -> list[Path]:
    """The files a compiled build depends on: the module (.py or .pyx) and its .pxd (when there is one)."""
    folder, module = package_dir(name), split(name)[1]
    files = [path for suffix in SOURCE_SUFFIXES if (path := folder / f"{module}{suffix}").exists()][:1]
    if not files:
        raise FileNotFoundError(f"no source for {name} in {folder}")
    pxd = folder / f"{module}.pxd"
    if pxd.exists():
        files.append(pxd)
    return files


def source_digest(name: str) -> str:
    digest = hashlib.sha256()
    for path in source_files(name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compiled_problem(name: str) -> str | None:
    """Why the compiled build of ``name`` cannot be used, or None when it can."""
    package, module = split(name)
    try:
        native = importlib.import_module(f"{package}.{native_name(name)}")
    except ImportError as error:
        return f"not built ({error}); run `make venv`"
    if getattr(native, "SOURCE_SHA256", None) != source_digest(name):
        return f"stale: {package}/{source_files(name)[0].name} changed since it was built; run `make venv`"
    return None


def compiled(name: str, fallback: str) -> ModuleType | None:
    """The compiled build of ``name`` when it is current; otherwise None, after logging why and
    that ``fallback`` (what the caller runs instead) is used."""
    problem = compiled_problem(name)
    if problem is None:
        package = split(name)[0]
        return importlib.import_module(f"{package}.{native_name(name)}")
    log.warning("%s.%s: using %s, the compiled build is %s", *split(name), fallback, problem)
    return None


def load(name: str) -> tuple[ModuleType, bool]:
    """The module to use for ``name`` (plain Python, see above) and whether it is the compiled one."""
    module = compiled(name, "the pure-Python module")
    if module is not None:
        return module, True
    package, pure = split(name)
    return importlib.import_module(f"{package}.{pure}"), False

"""Compile the modules in genesis.native.COMPILED with Cython, in place (run by `make venv`).

Usage: .venv/bin/python scripts/build_native.py [--force]

For each module ``<package>/<name>.py`` or ``.pyx`` (+ ``<name>.pxd``): a copy named ``_<name>_native`` with
the sources' digest appended (``SOURCE_SHA256``) is cythonized and compiled in a temporary
directory, and the extension is moved into ``<package>/`` atomically (a running process keeps
its mapped copy). Up-to-date builds are skipped. Without Cython, a C compiler or Python's
headers it explains what is missing and exits 0: Genesis then runs the pure-Python modules
(and numpy code for the engine's grid kernels).
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from genesis import native  # noqa: E402

# The sources' annotations are for readers and type checkers: they must not become C type
# checks (with them, module init fails on an ABC-typed argument). Bounds and wraparound checks
# stay on: the code indexes with negative numbers (loops[-1]).
DIRECTIVES = {"language_level": 3, "annotation_typing": False}
# A mismatched function pointer in the generated C is a crash waiting to happen: fail the build.
# No contraction of a*b + c into one fused multiply-add: the engine's kernels must round exactly
# as the numpy code they replace (bit-identical distances, hence identical worlds).
COMPILE_ARGS = ["-O2", "-Werror=incompatible-pointer-types", "-ffp-contract=off"]


def build_problem() -> str | None:
    """What the build needs and this machine lacks, or None."""
    try:
        importlib.import_module("Cython")
    except ImportError:
        return "Cython is not installed (it is pinned in requirements.lock)"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}); install gcc"
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.exists():
        return f"{header} is missing; install python{sys.version_info.major}.{sys.version_info.minor}-dev"
    return None


def build(name: str) -> Path:
    from Cython.Build import cythonize
    from setuptools import Extension
    from setuptools.dist import Distribution

    package_name, _ = native.split(name)
    module = native.native_name(name)
    sources = native.source_files(name)
    with tempfile.TemporaryDirectory(prefix="genesis-native-") as tmp:
        package = Path(tmp) / package_name
        package.mkdir()
        (package / "__init__.py").write_text("")
        source = package / f"{module}{sources[0].suffix}"
        source.write_text(f"{sources[0].read_text()}\n\nSOURCE_SHA256 = {native.source_digest(name)!r}\n")
        for pxd in sources[1:]:
            shutil.copyfile(pxd, package / f"{module}.pxd")
        extension = Extension(f"{package_name}.{module}", [str(source)], extra_compile_args=COMPILE_ARGS)
        distribution = Distribution({
            "ext_modules": cythonize([extension], compiler_directives=DIRECTIVES, quiet=True),
        })
        command = distribution.get_command_obj("build_ext")
        command.build_lib = str(Path(tmp) / "lib")
        command.build_temp = str(Path(tmp) / "temp")
        distribution.run_command("build_ext")
        built = Path(command.get_ext_fullpath(extension.name))
        target = native.package_dir(name) / built.name
        staged = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(built, staged)
        os.replace(staged, target)
        return target


def main() -> int:
    force = "--force" in sys.argv[1:]
    problem = build_problem()
    if problem is not None:
        print(f"native build skipped: {problem}; Genesis uses the pure-Python modules", file=sys.stderr)
        return 0
    # Checking a build imports its package, whose modules may warn that the build is missing:
    # this script says itself what it builds.
    logging.getLogger("genesis.native").setLevel(logging.ERROR)
    for name in native.COMPILED:
        if not force and native.compiled_problem(name) is None:
            print(f"{name}: compiled build is current")
            continue
        started = time.monotonic()
        target = build(name)
        print(f"{name}: compiled to {target.relative_to(native.package_dir(name).parent)} "
              f"in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The trait-host image: one Python runtime, its standard library and the trait host, nothing else.

No registry is reachable here, so the image is assembled offline: a minimal root filesystem
(the local PyPy or CPython binary — ``GENESIS_TRAIT_HOST_RUNTIME`` — its standard library without
tests/tooling, the shared libraries it links) is streamed as a tar into ``docker import``. Hosts
that can pull use ``sandbox/Dockerfile`` instead and set ``GENESIS_SANDBOX_IMAGE``.

    python -m sandbox.image ensure   # build the sandbox's and the engine's images unless present
    python -m sandbox.image build    # rebuild them
    python -m sandbox.image name     # print the sandbox image's tag ("names": both)
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from genesis import rules
from genesis.config import get_settings

log = logging.getLogger("genesis.sandbox.image")

HERE = Path(__file__).resolve().parent
TRAIT_HOST = HERE / "trait_host.py"
IMAGE_REPOSITORY = "genesis-trait-host"
SANDBOX_UID = 10001
HOST_PATH_IN_IMAGE = "/opt/genesis/trait_host.py"
CPYTHON_IN_IMAGE = "/usr/local/bin/python3"
# A symlink to the real binary (PyPy finds its standard library next to the file it links to);
# the same path as in the official pypy images, so sandbox/Dockerfile builds alike.
PYPY_IN_IMAGE = "/usr/local/bin/pypy3"
# Flags for every trait-host container: isolated mode, no site, no bytecode writes.
INTERPRETER_FLAGS = ["-I", "-S", "-B"]

# Parts of the standard library a trait host never needs (tests, GUIs, packaging, docs).
STDLIB_EXCLUDES = {
    "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
    "site-packages", "dist-packages", "venv", "distutils", "unittest", "sqlite3", "curses",
    "dbm", "xmlrpc", "wsgiref", "http", "urllib", "email", "xml", "asyncio", "multiprocessing",
    "concurrent", "html", "json/tests", "ctypes/test",
}


@dataclass(frozen=True)
class Runtime:
    """A Python that runs trait code: ``pypy`` or ``cpython``. Its binary on this machine is only
    needed to build its image offline (a prebuilt image, GENESIS_SANDBOX_IMAGE / _ENGINE_IMAGE,
    needs none)."""

    name: str  # "pypy" | "cpython"
    path_in_image: str
    language: tuple[int, int]  # the Python language version it implements (rules.TRAIT_LANGUAGE)

    @property
    def command(self) -> list[str]:
        return [self.path_in_image, *INTERPRETER_FLAGS, HOST_PATH_IN_IMAGE]

    def binary(self) -> Path:
        return _local_binary(self.name)


class RuntimeMissing(RuntimeError):
    pass


def _resolve(candidates: tuple[str, ...]) -> Path | None:
    for candidate in candidates:
        found = shutil.which(candidate) if "/" not in candidate else candidate
        if found and Path(found).exists():
            return Path(os.path.realpath(found))
    return None


def engine_runtime() -> Runtime:
    """The live world's long-lived trait host (GENESIS_TRAIT_HOST_RUNTIME, default PyPy: its JIT
    runs warm trait calls several times faster, which is most of a live tick)."""
    return runtime(get_settings().trait_host_runtime)


def sandbox_runtime() -> Runtime:
    """The sandbox test's one-mutation containers (GENESIS_SANDBOX_RUNTIME, default CPython: it
    starts in a fraction of PyPy's time and a 50-tick test ends before a JIT would pay off)."""
    return runtime(get_settings().sandbox_runtime)


def runtime(name: str) -> Runtime:
    """``pypy`` (Debian's pypy3) or ``cpython`` (the machine's python3.11)."""
    if name not in rules.TRAIT_LANGUAGE:
        raise ValueError(f"unknown trait host runtime {name!r} (pypy | cpython)")
    return Runtime(name, PYPY_IN_IMAGE if name == "pypy" else CPYTHON_IN_IMAGE, rules.TRAIT_LANGUAGE[name])


@functools.cache  # the binaries do not change while a process runs
def _local_binary(name: str) -> Path:
    """The runtime's binary here, checked to implement the language the gatekeeper validates."""
    if name == "pypy":
        binary = _resolve(("/usr/bin/pypy3", "pypy3"))
        if binary is None:
            raise RuntimeMissing(
                "a trait runtime is pypy but no pypy3 is installed: run scripts/services.sh (it installs "
                "Debian's pypy3), set GENESIS_TRAIT_HOST_RUNTIME=cpython, or give a prebuilt GENESIS_ENGINE_IMAGE"
            )
    else:
        binary = _resolve(("/usr/bin/python3.11", "/usr/local/bin/python3.11", sys.executable))
        if binary is None:
            raise RuntimeMissing("no python3.11 binary found to build the trait-host image from")
    language = _language_of(binary)
    if language != rules.TRAIT_LANGUAGE[name]:
        raise RuntimeMissing(
            f"{binary} implements Python {language[0]}.{language[1]} but the gatekeeper validates "
            f"{name} traits as {rules.TRAIT_LANGUAGE[name][0]}.{rules.TRAIT_LANGUAGE[name][1]} (genesis/rules.py TRAIT_LANGUAGE)"
        )
    return binary


def _ask(binary: Path, code: str) -> str:
    out = subprocess.run([str(binary), "-I", "-S", "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _language_of(binary: Path) -> tuple[int, int]:
    major, minor = _ask(binary, "import sys; print(*sys.version_info[:2])").split()
    return int(major), int(minor)


def _stdlib_dir(binary: Path) -> Path:
    return Path(_ask(binary, "import sysconfig; print(sysconfig.get_paths()['stdlib'])"))


@functools.cache  # the trait host and its runtime do not change while a process runs
def image_tag(rt: Runtime | None = None) -> str:
    """The image of runtime ``rt`` (default: the sandbox test's). Content-addressed: a new trait
    host or runtime means a new image. GENESIS_SANDBOX_IMAGE / GENESIS_ENGINE_IMAGE override."""
    settings = get_settings()
    rt = rt or sandbox_runtime()
    override = settings.engine_image if rt.name == settings.trait_host_runtime and settings.engine_image else (
        settings.sandbox_image if rt.name == settings.sandbox_runtime else "")
    if override:
        return override
    digest = hashlib.sha256()
    digest.update(TRAIT_HOST.read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update(f"{rt.name}:{rt.binary()}:{rt.language}".encode())
    return f"{IMAGE_REPOSITORY}:{rt.name}-{digest.hexdigest()[:12]}"


def _shared_libraries(paths: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for path in paths:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
        for match in re.finditer(r"(/\S+\.so[^\s]*)", out):
            libs.add(Path(match.group(1)))
    return libs


def _rootfs_tar(rt: Runtime) -> bytes:
    python = rt.binary()
    stdlib = _stdlib_dir(python)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", dereference=True) as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
            tar.addfile(info)

        def add_bytes(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))

        def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode &= 0o755
            return info

        for name in ("etc", "tmp", "opt", "opt/genesis", "usr", "usr/bin", "usr/local", "usr/local/bin"):
            add_dir(name, 0o1777 if name == "tmp" else 0o755)
        add_bytes("etc/passwd", f"root:x:0:0::/root:/bin/false\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::/tmp:/bin/false\n".encode())
        add_bytes("etc/group", f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n".encode())
        if rt.name == "pypy":  # the binary at its own path, and the command's path linking to it
            tar.add(str(python), arcname=python.as_posix().lstrip("/"), filter=root_owned)
            link = tarfile.TarInfo(rt.path_in_image.lstrip("/"))
            link.type, link.linkname, link.mode, link.mtime = tarfile.SYMTYPE, python.as_posix(), 0o777, int(time.time())
            tar.addfile(link)
        else:
            tar.add(str(python), arcname=rt.path_in_image.lstrip("/"), filter=root_owned)
        tar.add(str(TRAIT_HOST), arcname=HOST_PATH_IN_IMAGE.lstrip("/"), filter=root_owned)

        def skip_unneeded(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            relative = info.name[len(stdlib.as_posix().lstrip("/")) + 1 :]
            top = relative.split("/", 1)[0]
            if top in STDLIB_EXCLUDES or relative in STDLIB_EXCLUDES or "/test" in f"/{relative}/":
                return None
            return root_owned(info)

        # Keep the stdlib at its original path: the binary finds it through its compiled prefix.
        tar.add(str(stdlib), arcname=stdlib.as_posix().lstrip("/"), filter=skip_unneeded)
        # Extension modules (CPython's lib-dynload, PyPy's cffi modules) and what they link.
        binaries = [python, *stdlib.rglob("*.so")]
        for lib in sorted(_shared_libraries(binaries)):
            if lib.exists():
                tar.add(str(lib), arcname=lib.as_posix().lstrip("/"), filter=root_owned)
    return buffer.getvalue()


def build(client: docker.DockerClient | None = None, rt: Runtime | None = None) -> str:
    client = client or docker.from_env()
    rt = rt or sandbox_runtime()
    tag = image_tag(rt)
    repository, version = tag.rsplit(":", 1)
    started = time.monotonic()
    data = _rootfs_tar(rt)
    client.api.import_image_from_data(
        data,
        repository=repository,
        tag=version,
        changes=[f"USER {SANDBOX_UID}:{SANDBOX_UID}", "WORKDIR /tmp", f"CMD {rt.command!r}".replace("'", '"')],
    )
    client.images.get(tag)  # raises if the import did not produce it
    log.info("built %s from %s (%s, %.0f MB rootfs, %.1fs)", tag, rt.binary(), rt.name, len(data) / 1e6, time.monotonic() - started)
    return tag


def ensure(client: docker.DockerClient | None = None, rt: Runtime | None = None) -> str:
    """The image of runtime ``rt`` (default: the sandbox test's), built if missing."""
    client = client or docker.from_env()
    rt = rt or sandbox_runtime()
    tag = image_tag(rt)
    try:
        client.images.get(tag)
        log.info("trait-host image %s is present", tag)
        return tag
    except ImageNotFound:
        built = build(client, rt)
        remove_older_images(client, keep=built)
        return built


def remove_older_images(client: docker.DockerClient, keep: str) -> None:
    """Earlier trait-host builds of the same runtime (each trait host change is a new tag) that
    nothing uses. The other runtime's current image is left alone."""
    runtime_prefix = keep.rsplit(":", 1)[1].split("-", 1)[0] + "-"
    for old in client.images.list(name=IMAGE_REPOSITORY):
        if keep in old.tags:
            continue
        versions = [tag.rsplit(":", 1)[1] for tag in old.tags]
        if any("-" in v and not v.startswith(runtime_prefix) for v in versions):
            continue  # another runtime's build
        try:
            client.images.remove(old.id)
        except docker.errors.APIError:  # still used by a container: keep it for now
            pass


def both_runtimes() -> list[Runtime]:
    """The sandbox test's runtime and the live engine's (once if they are the same)."""
    return list(dict.fromkeys([sandbox_runtime(), engine_runtime()]))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)  # what it built or found
    action = sys.argv[1] if len(sys.argv) > 1 else "ensure"
    if action == "name":
        print(image_tag())
    elif action == "names":
        for rt in both_runtimes():
            print(rt.name, image_tag(rt))
    elif action == "build":
        for rt in both_runtimes():
            build(rt=rt)
    elif action == "ensure":
        for rt in both_runtimes():
            ensure(rt=rt)
    else:
        sys.exit(f"usage: python -m sandbox.image [ensure|build|name|names], not {action!r}")

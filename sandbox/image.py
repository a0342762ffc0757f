"""The trait-host image: CPython 3.11, its standard library and the trait host, nothing else.

One image serves the sandbox test and the live engine (one runtime: a trait that passes its
test behaves the same live). No registry is reachable here, so the image is assembled offline:
a minimal root filesystem (the local python3.11 binary, its standard library without
tests/tooling, the shared libraries it links) is streamed as a tar into ``docker import``. Hosts
that can pull use ``sandbox/Dockerfile`` instead and set ``GENESIS_SANDBOX_IMAGE``.

    python -m sandbox.image ensure   # build the image unless present
    python -m sandbox.image build    # rebuild it
    python -m sandbox.image name     # print its tag
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
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from genesis import rules
from genesis.config import get_settings

log = logging.getLogger("genesis.sandbox.image")

HERE = Path(__file__).resolve().parent
TRAIT_HOST = HERE / "trait_host.py"
HOST_PACKAGE = HERE / "traithost"  # the host itself, beside its entry point in the image
IMAGE_REPOSITORY = "genesis-trait-host"
SANDBOX_UID = 10001
HOST_PATH_IN_IMAGE = "/opt/genesis/trait_host.py"
PYTHON_IN_IMAGE = "/usr/local/bin/python3"
# Flags for every trait-host container: isolated mode, no site, no bytecode writes.
INTERPRETER_FLAGS = ["-I", "-S", "-B"]

# Parts of the standard library a trait host never needs (tests, GUIs, packaging, docs).
STDLIB_EXCLUDES = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "site-packages",
    "dist-packages",
    "venv",
    "distutils",
    "unittest",
    "sqlite3",
    "curses",
    "dbm",
    "xmlrpc",
    "wsgiref",
    "http",
    "urllib",
    "email",
    "xml",
    "asyncio",
    "multiprocessing",
    "concurrent",
    "html",
    "json/tests",
    "ctypes/test",
}


class RuntimeMissing(RuntimeError):
    pass


# The one interpreter that runs traits, in the sandbox test and live: what the gatekeeper
# validates (rules.TRAIT_LANGUAGE) and what the image is built from.
COMMAND = [PYTHON_IN_IMAGE, *INTERPRETER_FLAGS, HOST_PATH_IN_IMAGE]


@functools.cache  # the binary does not change while a process runs
def python_binary() -> Path:
    """The python3.11 the image is built from, checked to implement the language the gatekeeper
    validates: the interpreter running this process first, so that the gatekeeper, the sandbox
    test and the live host run one CPython, to the patch level (the host's hello is checked
    against it, see ``sandbox.container.check_runtime``)."""
    binary = next(
        (
            Path(os.path.realpath(found))
            for candidate in (sys.executable, "/usr/bin/python3.11", "/usr/local/bin/python3.11")
            if (found := shutil.which(candidate) if "/" not in candidate else candidate) and Path(found).exists()
        ),
        None,
    )
    if binary is None:
        raise RuntimeMissing("no python3.11 binary found to build the trait-host image from")
    language = _language_of(binary)
    if language != rules.TRAIT_LANGUAGE:
        raise RuntimeMissing(
            f"{binary} implements Python {language[0]}.{language[1]} but the gatekeeper validates traits as "
            f"{rules.TRAIT_LANGUAGE[0]}.{rules.TRAIT_LANGUAGE[1]} (genesis/rules.py TRAIT_LANGUAGE)"
        )
    return binary


@functools.cache
def python_version() -> str:
    """The image's CPython version to the patch level ("3.11.2")."""
    return _ask(python_binary(), "import platform; print(platform.python_version())")


def _ask(binary: Path, code: str) -> str:
    out = subprocess.run([str(binary), "-I", "-S", "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _language_of(binary: Path) -> tuple[int, int]:
    major, minor = _ask(binary, "import sys; print(*sys.version_info[:2])").split()
    return int(major), int(minor)


def _stdlib_dir(binary: Path) -> Path:
    return Path(_ask(binary, "import sysconfig; print(sysconfig.get_paths()['stdlib'])"))


@functools.cache  # the trait host and its runtime do not change while a process runs
def image_tag() -> str:
    """The trait-host image's tag. Content-addressed: a new trait host or Python means a new
    image. GENESIS_SANDBOX_IMAGE overrides it (a prebuilt image)."""
    settings = get_settings()
    if settings.sandbox.image:
        return settings.sandbox.image
    digest = hashlib.sha256()
    for path in host_files():
        digest.update(path.name.encode() + path.read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update(f"{python_binary()}:{python_version()}:{rules.TRAIT_LANGUAGE}".encode())
    return f"{IMAGE_REPOSITORY}:cpython-{digest.hexdigest()[:12]}"


def _shared_libraries(paths: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for path in paths:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
        for match in re.finditer(r"(/\S+\.so[^\s]*)", out):
            libs.add(Path(match.group(1)))
    return libs


def host_files() -> list[Path]:
    """What the image carries of Genesis: the host's entry point and its package (no caches)."""
    return [TRAIT_HOST, *sorted(HOST_PACKAGE.glob("*.py"))]


def _rootfs_tar() -> bytes:
    python = python_binary()
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
        add_bytes(
            "etc/passwd",
            f"root:x:0:0::/root:/bin/false\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::/tmp:/bin/false\n".encode(),
        )
        add_bytes("etc/group", f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n".encode())
        tar.add(str(python), arcname=PYTHON_IN_IMAGE.lstrip("/"), filter=root_owned)
        add_dir(f"opt/genesis/{HOST_PACKAGE.name}")
        for path in host_files():
            where = HOST_PATH_IN_IMAGE if path == TRAIT_HOST else f"/opt/genesis/{HOST_PACKAGE.name}/{path.name}"
            tar.add(str(path), arcname=where.lstrip("/"), filter=root_owned)

        def skip_unneeded(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            relative = info.name[len(stdlib.as_posix().lstrip("/")) + 1 :]
            top = relative.split("/", 1)[0]
            if top in STDLIB_EXCLUDES or relative in STDLIB_EXCLUDES or "/test" in f"/{relative}/":
                return None
            return root_owned(info)

        # Keep the stdlib at its original path: the binary finds it through its compiled prefix.
        tar.add(str(stdlib), arcname=stdlib.as_posix().lstrip("/"), filter=skip_unneeded)
        # Extension modules (lib-dynload) and what they link.
        binaries = [python, *stdlib.rglob("*.so")]
        for lib in sorted(_shared_libraries(binaries)):
            if lib.exists():
                tar.add(str(lib), arcname=lib.as_posix().lstrip("/"), filter=root_owned)
    return buffer.getvalue()


def build(client: docker.DockerClient | None = None) -> str:
    client = client or docker.from_env()
    tag = image_tag()
    repository, version = tag.rsplit(":", 1)
    started = time.monotonic()
    data = _rootfs_tar()
    client.api.import_image_from_data(
        data,
        repository=repository,
        tag=version,
        changes=[f"USER {SANDBOX_UID}:{SANDBOX_UID}", "WORKDIR /tmp", f"CMD {COMMAND!r}".replace("'", '"')],
    )
    client.images.get(tag)  # raises if the import did not produce it
    log.info(
        "built %s from %s (%.0f MB rootfs, %.1fs)", tag, python_binary(), len(data) / 1e6, time.monotonic() - started
    )
    return tag


def ensure(client: docker.DockerClient | None = None) -> str:
    """The trait-host image, built if missing (and older builds removed)."""
    client = client or docker.from_env()
    tag = image_tag()
    try:
        client.images.get(tag)
        log.info("trait-host image %s is present", tag)
        return tag
    except ImageNotFound:
        built = build(client)
        remove_older_images(client, keep=built)
        return built


def remove_older_images(client: docker.DockerClient, keep: str) -> None:
    """Earlier trait-host builds (each trait host change is a new tag) that nothing uses."""
    for old in client.images.list(name=IMAGE_REPOSITORY):
        if keep in old.tags or old.id is None:
            continue
        try:
            client.images.remove(old.id)
        except docker.errors.APIError:  # still used by a container: keep it for now
            pass


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)  # what it built or found
    action = sys.argv[1] if len(sys.argv) > 1 else "ensure"
    if action == "name":
        print(image_tag())
    elif action == "build":
        build()
    elif action == "ensure":
        ensure()
    else:
        sys.exit(f"usage: python -m sandbox.image [ensure|build|name], not {action!r}")

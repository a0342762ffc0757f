"""The GEPA program image: the machine's CPython 3.11 with its whole standard library (DSPy needs
asyncio, http, email, json, sqlite3, ...) and the program host, nothing else.

Built offline like the trait-host image (``docker import`` of an assembled root filesystem;
sandbox/image.py). DSPy and a repository's requirements are not in the image: they are installed
once per requirements hash on the host (gepa_steps/envs.py) and mounted read-only.

    python -m gepa_steps.image ensure | build | name
"""

from __future__ import annotations

import functools
import hashlib
import io
import sys
import tarfile
import time
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from sandbox import image as trait_image

HERE = Path(__file__).resolve().parent
PROGRAM_HOST = HERE / "program_host.py"
CODING_AGENT = HERE / "coding_agent.py"
CLAUDE_AGENT = HERE / "claude_coding_agent.py"
IMAGE_REPOSITORY = "genesis-program-host"
PYTHON_IN_IMAGE = "/usr/local/bin/python3"
HOST_IN_IMAGE = "/opt/genesis/program_host.py"
AGENT_IN_IMAGE = "/opt/genesis/coding_agent.py"
CLAUDE_AGENT_IN_IMAGE = "/opt/genesis/claude_coding_agent.py"
ENV_IN_IMAGE = "/opt/env"  # the mounted per-requirements environment (PYTHONPATH)
WORKTREES_IN_IMAGE = "/worktrees"  # the client's worktrees, mounted read-only
STDLIB_EXCLUDES = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "pydoc_data",
}
# The system libraries manylinux wheels may link (tokenizers, tiktoken, pydantic-core, ...) besides
# what the interpreter's own extension modules need, and the CA bundle for HTTPS to allow-listed hosts.
MANYLINUX_LIBRARIES = (
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libc.so.6",
    "libnsl.so.1",
    "libutil.so.1",
    "libpthread.so.0",
    "libresolv.so.2",
    "libz.so.1",
    "libexpat.so.1",
)
EXTRA_FILES = (
    *(f"/usr/lib/x86_64-linux-gnu/{name}" for name in MANYLINUX_LIBRARIES),
    "/etc/ssl/certs/ca-certificates.crt",
)
COMMAND = [PYTHON_IN_IMAGE, "-s", "-B", HOST_IN_IMAGE]


def python_binary() -> Path:
    return trait_image.python_binary()


@functools.cache
def image_tag() -> str:
    digest = hashlib.sha256()
    digest.update(PROGRAM_HOST.read_bytes())
    digest.update(CODING_AGENT.read_bytes())
    digest.update(CLAUDE_AGENT.read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update(str(python_binary()).encode())
    return f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:12]}"


def _rootfs_tar() -> bytes:
    python = python_binary()
    stdlib = trait_image._stdlib_dir(python)
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w", dereference=True) as tar:

        def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode &= 0o755
            return info

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
            tar.addfile(info)

        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))

        for name in ("etc", "tmp", "opt", "opt/genesis", "opt/env", "worktrees", "usr", "usr/local", "usr/local/bin"):
            add_dir(name, 0o1777 if name == "tmp" else 0o755)
        uid = trait_image.SANDBOX_UID
        add_bytes("etc/passwd", f"root:x:0:0::/root:/bin/false\nsandbox:x:{uid}:{uid}::/tmp:/bin/false\n".encode())
        add_bytes("etc/group", f"root:x:0:\nsandbox:x:{uid}:\n".encode())
        add_bytes("etc/hosts", b"127.0.0.1 localhost\n")
        tar.add(str(python), arcname=PYTHON_IN_IMAGE.lstrip("/"), filter=root_owned)
        tar.add(str(PROGRAM_HOST), arcname=HOST_IN_IMAGE.lstrip("/"), filter=root_owned)
        tar.add(str(CODING_AGENT), arcname=AGENT_IN_IMAGE.lstrip("/"), filter=root_owned)
        tar.add(str(CLAUDE_AGENT), arcname=CLAUDE_AGENT_IN_IMAGE.lstrip("/"), filter=root_owned)

        def skip_unneeded(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            relative = info.name[len(stdlib.as_posix().lstrip("/")) + 1 :]
            if relative.split("/", 1)[0] in STDLIB_EXCLUDES or "/test/" in f"/{relative}/" or "__pycache__" in relative:
                return None
            return root_owned(info)

        tar.add(str(stdlib), arcname=stdlib.as_posix().lstrip("/"), filter=skip_unneeded)
        libraries = trait_image._shared_libraries([python, *stdlib.rglob("*.so")])
        extras = {Path(p) for p in EXTRA_FILES if Path(p).exists()}
        for path in sorted(libraries | extras | trait_image._shared_libraries(sorted(extras))):
            if path.exists():
                tar.add(str(path), arcname=path.as_posix().lstrip("/"), filter=root_owned)
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
        changes=[
            f"USER {trait_image.SANDBOX_UID}:{trait_image.SANDBOX_UID}",
            "WORKDIR /tmp",
            f"ENV PYTHONPATH={ENV_IN_IMAGE}",
            "ENV HOME=/tmp",
            f"CMD {COMMAND!r}".replace("'", '"'),
        ],
    )
    client.images.get(tag)
    print(f"built {tag} ({len(data) / 1e6:.0f} MB rootfs, {time.monotonic() - started:.1f}s)", file=sys.stderr)
    return tag


def ensure(client: docker.DockerClient | None = None) -> str:
    client = client or docker.from_env()
    try:
        client.images.get(image_tag())
        return image_tag()
    except ImageNotFound:
        return build(client)


if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) > 1 else "ensure"
    if action == "name":
        print(image_tag())
    elif action == "build":
        build()
    elif action == "ensure":
        print(ensure())
    else:
        sys.exit(f"usage: python -m gepa_steps.image [ensure|build|name], not {action!r}")

"""The isolation flags every trait-host container must carry (DESIGN.md), checked on its
``docker inspect`` attributes."""

from __future__ import annotations

from typing import Any


def assert_isolated(attrs: dict[str, Any], memory_bytes: int) -> None:
    config = attrs["HostConfig"]
    assert config["NetworkMode"] == "none"
    assert config["ReadonlyRootfs"] is True
    assert config["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in config["SecurityOpt"]
    assert config["Memory"] == memory_bytes
    assert config["PidsLimit"] == 32
    assert config["NanoCpus"] == 1_000_000_000
    assert "/tmp" in config["Tmpfs"]
    assert attrs["Config"]["User"] == "10001:10001"
    assert not config.get("Binds"), "no host bind (-v) inside the sandbox"
    assert config["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "1"}}

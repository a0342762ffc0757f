"""The project's licence, and every runtime dependency's licence fitting it (scripts/licences.py):
a dependency under GPL or an unreadable licence would be refused."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata

from genesis.config import PROJECT_ROOT

spec = importlib.util.spec_from_file_location("licences", PROJECT_ROOT / "scripts" / "licences.py")
assert spec is not None and spec.loader is not None
licences = importlib.util.module_from_spec(spec)
spec.loader.exec_module(licences)


def a_distribution(tmp_path, *headers: str) -> metadata.Distribution:
    info = tmp_path / "thing-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.4\nName: thing\nVersion: 1.0\n" + "".join(h + "\n" for h in headers)
    )
    return metadata.PathDistribution(info)


def test_the_project_is_apache_licensed():
    assert "Apache License" in (PROJECT_ROOT / "LICENSE").read_text()[:200]
    assert 'license = {text = "Apache-2.0"}' in (PROJECT_ROOT / "pyproject.toml").read_text()


def test_every_runtime_dependency_fits():
    result = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "scripts" / "licences.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all fit Apache-2.0" in result.stdout
    for name in ("temporalio", "fastapi", "sqlalchemy", "cryptography", "gepa"):
        assert f"ok      {name} " in result.stdout, name


def test_licences_are_read_from_each_form_and_copyleft_is_refused(tmp_path):
    assert licences.licence_of(a_distribution(tmp_path / "a", "License-Expression: GPL-3.0-only OR MIT")) == ["MIT"]
    assert licences.licence_of(a_distribution(tmp_path / "b", "License-Expression: MIT AND Zlib")) == ["MIT", "Zlib"]
    assert licences.licence_of(a_distribution(tmp_path / "c", "License: Apache 2")) == ["Apache-2.0"]
    classified = a_distribution(tmp_path / "d", "Classifier: License :: OSI Approved :: ISC License (ISCL)")
    assert licences.licence_of(classified) == ["ISC"]
    for header in ("License-Expression: AGPL-3.0-or-later", "License: GNU General Public License v3", ""):
        found = licences.licence_of(a_distribution(tmp_path / "e" / str(len(header)), header))
        assert not set(found) <= licences.ALLOWED, (header, found)

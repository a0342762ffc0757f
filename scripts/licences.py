"""The licences of Genesis' runtime dependencies, checked to fit its own (Apache-2.0).

Walks the installed distributions that ``pyproject.toml``'s runtime dependencies (and the extras
named on the command line, ``gepa`` by default) pull in, reads each one's licence (its SPDX
``License-Expression``, else its ``License`` field or classifiers, mapped to SPDX ids below) and
prints one line per distribution. Exit status 1 when one is not among ``ALLOWED`` or cannot be
read: a new dependency under GPL, AGPL or an unknown licence is refused, not shipped.

    python scripts/licences.py [--extra gepa] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

# Permissive licences (and MPL-2.0, copyleft per file: certifi's CA bundle is used, not changed).
ALLOWED = {
    "Apache-2.0",
    "MIT",
    "MIT-0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "0BSD",
    "ISC",
    "PSF-2.0",
    "Zlib",
    "CC0-1.0",
    "MPL-2.0",
    "Unlicense",
}
# What distributions write where they give no SPDX expression: their License field or classifier.
NAMES = {
    "apache 2": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache-2.0": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "mit": "MIT",
    "mit license": "MIT",
    "bsd-3-clause": "BSD-3-Clause",
    "3-clause bsd license": "BSD-3-Clause",
    "bsd license": "BSD-3-Clause",
    "isc license": "ISC",
    "isc license (iscl)": "ISC",
    "mpl-2.0": "MPL-2.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
    "python software foundation license": "PSF-2.0",
}
PROJECT = Path(__file__).resolve().parent.parent


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def licence_of(dist: metadata.Distribution) -> list[str]:
    """The SPDX ids one of which (an ``OR``) or all of which (``AND``) the distribution is under:
    for ``A OR B`` the first allowed one, for ``A AND B`` each."""
    meta = dist.metadata
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        if " OR " in expression:
            choices = [part.strip("() ") for part in expression.split(" OR ")]
            return [next((c for c in choices if c in ALLOWED), choices[0])]
        return [part.strip("() ") for part in expression.split(" AND ")]
    field = (meta.get("License") or "").strip()
    if field and "\n" not in field and field.lower() in NAMES:
        return [NAMES[field.lower()]]
    classifiers = [c.split("::")[-1].strip().lower() for c in meta.get_all("Classifier") or [] if "License ::" in c]
    known = [NAMES[c] for c in classifiers if c in NAMES]
    return known[:1] or [field.splitlines()[0] if field else "unknown"]


def runtime_distributions(extras: list[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution the runtime dependencies need, by normalised name."""
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    found: dict[str, metadata.Distribution] = {}
    queue = [Requirement(r) for r in wanted]
    while queue:
        req = queue.pop()
        key = _key(req.name)
        if key == "genesis" or key in found:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # a dependency for another platform or Python, not installed here
        found[key] = dist
        for line in dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in (*req.extras, "")):
                queue.append(dep)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description="Check the runtime dependencies' licences against Apache-2.0")
    parser.add_argument("--extra", action="append", default=None, help="an extra of pyproject.toml (default: gepa)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    rows = []
    for key, dist in sorted(runtime_distributions(args.extra if args.extra is not None else ["gepa"]).items()):
        licences = licence_of(dist)
        refused = [name for name in licences if name not in ALLOWED]
        rows.append({"name": key, "version": dist.version, "licences": licences, "ok": not refused})
    if args.json:
        print(json.dumps({"distributions": rows, "ok": all(r["ok"] for r in rows)}, indent=2))
    else:
        for r in rows:
            print(f"{'ok     ' if r['ok'] else 'REFUSED'} {r['name']} {r['version']}: {' AND '.join(r['licences'])}")
        bad = [r["name"] for r in rows if not r["ok"]]
        print(f"{len(rows)} runtime distributions; " + (f"refused: {', '.join(bad)}" if bad else "all fit Apache-2.0"))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

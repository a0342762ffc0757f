"""Which agents may use which GitHub App installations (GENESIS_GEPA_GITHUB_INSTALLATIONS).

An installation id is no secret (it shows in GitHub's settings pages and webhooks), and a clone
with it reads what the installation's account granted the operator's App: so only the agents the
operator names may use it. Entries, comma separated: ``<installation_id>=<agent_id>`` (that agent;
list an installation once per agent) or ``<installation_id>=*`` (every caller, keyless ones under
GENESIS_AUTH=open included: a server with a single user). Nothing listed: no installation at all."""

from __future__ import annotations

import re
from dataclasses import dataclass

ANY_CALLER = "*"
_ENTRY = re.compile(r"^(?P<installation>[1-9][0-9]{0,18})=(?P<agent>\*|[A-Za-z0-9_-]{1,64})$")


@dataclass(frozen=True)
class InstallationGrants:
    grants: frozenset[tuple[int, str]] = frozenset()

    @classmethod
    def parse(cls, text: str) -> InstallationGrants:
        """Raises ValueError naming the first malformed entry."""
        grants = set()
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            match = _ENTRY.match(entry)
            if match is None:
                raise ValueError(
                    f"GitHub installation grant {entry!r} must be <installation_id>=<agent_id> or <installation_id>=*"
                )
            grants.add((int(match["installation"]), match["agent"]))
        return cls(frozenset(grants))

    def allows(self, installation_id: int, agent_id: str | None) -> bool:
        """``agent_id`` None: a keyless caller (GENESIS_AUTH=open), allowed only by a ``*`` entry."""
        return (installation_id, ANY_CALLER) in self.grants or (
            agent_id is not None and (installation_id, agent_id) in self.grants
        )

"""The world's rules in Postgres: the manifest's versions, capability grants, the policy gate and its
decisions, proposals to change the rules. The rules themselves (the package above) stay pure."""

"""Rounds of agents' actions: their records in Postgres (docs/rounds.md)."""

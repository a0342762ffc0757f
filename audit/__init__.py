"""The journal's records in Postgres: signed receipts, the rows the engine carries into the journal,
and the audit projection of the journal with the queries that read it (docs/journal.md, docs/receipts.md)."""

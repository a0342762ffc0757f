"""The world's record: the input journal (length+CRC framed, canonical CBOR records in a hash
chain, in segment files) and the snapshots bound to it (docs/journal.md)."""

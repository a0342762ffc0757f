"""The audit of the world's journal: its events, their signed export and an agent's timeline
(``routes``); signed receipts and the public keys that verify them (``routes_receipts``); their
bodies in ``schemas``."""

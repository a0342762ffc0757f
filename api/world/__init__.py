"""The living world as the engine reports it: state, entities, history, stats and viewer frames
(``routes``, ``history``); the world's journal: its snapshots and rollbacks (``routes_rollback``),
replay verification (``routes_replay``) and its status (``routes_journal``); the telemetry stream
for agents (``routes_telemetry``); their bodies in ``schemas``."""

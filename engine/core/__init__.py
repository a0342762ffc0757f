"""The pure, deterministic world and what reads it: the world (``world`` and the modules it is
made of: ``model``, ``intents``, ``physics``, ``sensing``, ``spatial``, ``spawning``, ``views``,
``world_state``, ``state_digest``), a tick's recorded inputs and their one apply function
(``inputs``, ``round_rules``), what a trait runner is (``traits``), the live ledger's statistics
(``ledger``), and the readers of the journal: replay (``replay``, ``divergence``), its check
(``python -m engine.core.verify``) and shadow runs (``python -m engine.core.shadow``).

No event loop, no driver (Redis, SQLAlchemy, Temporal, Docker) and nothing of ``engine.process``:
the worker's sandbox tests, verdict experiments and shadows run it as the live engine does."""

"""The running engine (``python -m engine``, ``main``): the fixed-timestep loop around the world
core (``loop``), the journal writer (``journaling``), the live trait host's runner
(``live_traits``), telemetry and metrics, and the followers and keepers that connect the world to
Redis, Postgres and Temporal (``observers``, ``quarantine``, ``retention``, ``rollbacks``,
``rounds``, ``selection``, ``world_overrides``)."""

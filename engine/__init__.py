"""The world simulation, in two rooms: ``engine.core``, the pure, deterministic world and what
reads it (the apply function, the state hash, replay, shadow runs), and ``engine.process``, the
running engine (``python -m engine``) and its I/O. The core imports nothing of the process and no
driver (import-linter contracts in pyproject.toml)."""

"""``python -m engine``: the world engine process (engine/process/main.py)."""

from engine.process.main import run

if __name__ == "__main__":
    run()

"""``python -m genesis.cli`` = the ``genesis`` console script."""

from genesis.cli import app

if __name__ == "__main__":
    app(prog_name="genesis")

"""``python -m cli`` = the ``genesis`` console script."""

from cli import app

if __name__ == "__main__":
    app(prog_name="genesis")

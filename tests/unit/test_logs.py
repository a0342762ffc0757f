"""genesis/logs.py, console format: an exception is logged as Python prints its traceback."""

from __future__ import annotations

import io
import logging

from genesis.config import Settings
from genesis.logs import configure_logging


def test_console_tracebacks_are_plain_and_show_no_locals():
    configure_logging("test", Settings().override(log_format="console"))
    handler = logging.getLogger().handlers[-1]
    saved, handler.stream = handler.stream, io.StringIO()
    try:
        secret_local = "never-in-the-log"  # noqa: F841 - a local a rich traceback would print
        try:
            raise ValueError("the verdict")
        except ValueError:
            logging.getLogger("genesis.test").warning("activity failed", exc_info=True)
        text = handler.stream.getvalue()
    finally:
        handler.stream = saved
        logging.getLogger().removeHandler(handler)  # the rest of the session logs as before
    assert "activity failed" in text
    assert "Traceback (most recent call last):" in text and "ValueError: the verdict" in text
    assert "never-in-the-log" not in text and "╭" not in text  # no rich panel, no locals
    assert text.count("\n") < 15

"""Live traits, their versions and their family tree (``routes``); the answers in ``schemas``."""

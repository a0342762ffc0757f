"""``python -m watcher``: the Watcher process (the logic is in genesis/watcher.py)."""

"""The world viewer: its page at ``/`` and its files (``static/``), its configuration (``routes``,
``schemas``)."""

"""The API service's own pages: its health (``routes_health``: ``/api/health``, ``/health``) and its
reference pages (``routes_docs``: ``/docs``, ``/redoc``)."""

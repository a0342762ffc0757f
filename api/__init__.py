"""The HTTP and WebSocket surface of Genesis (FastAPI). The app factory is ``app``; each resource
is a package of its routes (``routes*.py``) and their bodies (``schemas.py``): ``agents``,
``audit``, ``evolution``, ``governance``, ``mutations``, ``rounds``, ``traits``, ``viewer``,
``world``, and the service's own pages in ``service``. The modules beside them are what the routes
share: who calls (``auth``), the process's clients as typed dependencies (``deps``), errors,
paging, ids in requests (``params``), the request checks and middleware, the hubs of the streams,
the policy gate, the engine's status and the workflow starter."""

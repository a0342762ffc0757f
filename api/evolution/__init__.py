"""Evolution as the API shows it: forced triggers and the cycles' records (``routes``), the
Evolution Feed (``routes_feed``), periodic improvement schedules (``routes_schedules``), tasks for
external agents and their claims (``routes_tasks``), the context agents write traits in
(``routes_context``); their bodies in ``schemas``."""

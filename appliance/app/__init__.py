"""The composition root: builds the store, the services, the servers and the jobs.

`Panel` (panel.py) is the one object that knows every part; `routes_of` (routes.py)
hands each route table only the parts it calls.
"""

from appliance.app.panel import Panel

__all__ = ["Panel"]

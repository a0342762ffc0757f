"""Agents' identity: registration and invitations (``routes``), the calling agent and its member,
its webhook secret (``routes_webhooks``); their bodies in ``schemas``."""

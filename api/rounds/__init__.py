"""Agents acting in the world through their members, in rounds (``routes``); their bodies in
``schemas``."""

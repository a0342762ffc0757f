"""The world's rules: the manifest, agents' capability grants and the policy gate's decisions
(``routes``), governed proposals to change the rules (``routes_proposals``); their bodies in
``schemas``."""

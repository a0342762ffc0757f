"""Who calls: the API keys of agents and operators (issued, stored hashed, verified) and the operators'
records."""

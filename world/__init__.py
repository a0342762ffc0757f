"""What the API asks of the running world outside its process: rollbacks to a kept snapshot."""

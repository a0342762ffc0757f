"""The Watcher and evolution: its rules, LLM providers, prompts, feed and schedules."""

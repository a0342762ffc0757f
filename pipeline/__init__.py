"""The mutation pipeline's shared records and policies (API, activities, engine): mutation proposals as
their workflows' input, lineage, live traits and their registry, quarantines, rollbacks, rate limits, webhooks."""

"""GEPA optimisation steps: API, workflows, activities, program hosts, egress, git."""

"""The mutation pipeline's shared records and policies (API, activities, engine)."""

"""Alembic migrations. Only these change the schema."""

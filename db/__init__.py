"""Phoenix tracking store: SQLAlchemy models and the only module that writes SQL."""

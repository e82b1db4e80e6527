"""The tracking store: SQLAlchemy models (`models`), entities, the store (`store`, `session_scope`), every aggregate
read (`queries`), tags, notes, baselines (`tracker`), distillation jobs (`distills`), migrations' runner
(`migrate`). The only package that writes SQL.
"""

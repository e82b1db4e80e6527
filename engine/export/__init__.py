"""Exports of a run, together: CSV, JSON and a self-contained SQLite file (files), and an MLflow run (mlflow)."""

"""The tracking store, one class as mlflow's is: `store.Store` holds every read and write, as methods that return
entities (`entities`), built from parts over one connection and `session_scope` (`connect`): runs, the queue and
requests (`store`), the reads about runs and modes (`queries`), the series the charts draw (`series`), tags, notes
and baselines (`tracker`), distillation jobs (`distills`). SQLAlchemy models (`models`), migrations' runner
(`migrate`). The only package that writes SQL.
"""

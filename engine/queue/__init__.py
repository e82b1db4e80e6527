"""The queue: workers that claim queued runs from the store and execute them, their registry and heartbeat, and the
worker a dashboard starts for itself. Running one run is engine.bench; this is who runs it, and when. The worker's
settings: `config`.
"""

"""Phoenix's own OpenAI-compatible server: `api` over `service` (continuous batching in `scheduler`, one forward
verifying every row in `batch`, k tuned to the load in `tuner`). Clients and managers of other engines, and the load
sweep that measures any server, live in `engine/engines/`.
"""

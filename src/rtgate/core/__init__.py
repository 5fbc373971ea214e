"""The floor everything stands on: the budget, the request's words, latency sketches,
metrics, traces, the error tree, and the owner of background tasks.

Nothing here imports anything else of rtgate; every other package may import it.
"""

"""The floor everything stands on: the budget, the request's words, latency sketches,
metrics, traces and the error tree.

Nothing here imports anything else of rtgate; every other package may import it.
"""

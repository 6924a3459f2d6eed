"""The bottom floor: what every package uses (optional imports, checkpoint loading, ports).

Nothing here imports from the rest of ``lightning_mgpu``.
"""

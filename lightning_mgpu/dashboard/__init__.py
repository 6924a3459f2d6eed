"""The local dashboard: read a run (CSV, TensorBoard, Neptune offline), render it with Plotly, serve it live.

``reader.py`` reads runs; ``render.py`` builds the page and PNGs; ``serve.py`` serves a live view.
Nothing under ``strategies/`` or ``callbacks/`` imports this package.
"""

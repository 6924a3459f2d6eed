"""``python -m lightning_mgpu``: see :mod:`lightning_mgpu.cli`."""

import sys

from lightning_mgpu.cli import main

if __name__ == "__main__":
    sys.exit(main())

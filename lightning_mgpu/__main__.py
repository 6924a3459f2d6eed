"""Command line: ``python -m lightning_mgpu {info,dashboard}``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lightning_mgpu", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, registered strategies, devices and launch commands")
    dash = sub.add_parser("dashboard", help="render a self-contained HTML dashboard of a run")
    dash.add_argument("run", help="a CSV-logger folder or a Neptune offline run folder")
    dash.add_argument("--out", default=None, help="output folder (default: RUN/dashboard; for a Neptune run, <data dir>/dashboards/<run>)")
    dash.add_argument("--no-png", action="store_true", help="write only the HTML page, not the charts as PNG (no matplotlib needed)")
    args = parser.parse_args(argv)
    if args.command == "info":
        from lightning_mgpu.utilities.info import main as info_main

        return info_main()
    from lightning_mgpu.utilities.dashboard import main as dashboard_main

    return dashboard_main(args)


if __name__ == "__main__":
    sys.exit(main())

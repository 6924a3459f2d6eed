"""The benchmark suite's harness: what each benchmark writes (result.py), how ratios are summarised (stats.py), which
benchmarks exist (registry.py), the machine they ran on (machine.py) and the report (report.py).

Benchmark scripts import it as ``harness`` (``python benchmarks/bench_x.py`` puts ``benchmarks/`` on ``sys.path``);
tests import it as ``benchmarks.harness``.
"""

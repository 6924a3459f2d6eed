"""The benchmark suite's harness, imported as ``benchmarks.harness`` (run the scripts as ``python -m benchmarks.X``
from the repository root: FairScale installs a top-level ``benchmarks`` package of its own into site-packages).

- ``interleave`` (rounds.py): arms side by side in rotating rounds;
- ``launch_ranks``/``run_ranks`` (ranks.py): a benchmark's ranks, the first failure stopping all;
- ``quiet_trainer``/``timed_fit`` (trainer.py) and ``models.py``: the Trainer, and the model, data and raw step the arms
  share;
- ``clock.py``: step marks after the device's queued work; ``cli.py``: the options every benchmark shares;
- what each benchmark writes (result.py), how ratios are summarised (stats.py), which benchmarks exist
  (registry.py), the machine they ran on (machine.py) and the report (report.py).
"""

from .ranks import ProcessFailure, finish_rank, launch_ranks, run_ranks, write_rank_result
from .rounds import interleave

__all__ = ["ProcessFailure", "finish_rank", "interleave", "launch_ranks", "run_ranks", "write_rank_result"]

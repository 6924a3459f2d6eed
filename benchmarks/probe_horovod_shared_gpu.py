"""Ask NCCL whether two Horovod workers may share one GPU, and record its answer.

Run by ``benchmarks/gpu_check.sh`` on a machine with fewer GPUs than workers::

    horovodrun -np 2 -H localhost:2 python -m benchmarks.probe_horovod_shared_gpu OUT.jsonl

Every worker pins ``cuda:0``, allreduces a CUDA tensor through Horovod (NCCL in a ``build-horovod --gpu`` build) and
appends one JSON line to ``OUT.jsonl``: the sum it got, or the error. NCCL has refused two ranks on one device
("Duplicate GPU detected"); where it does, this file says so, and the one-worker GPU tests
(``tests/integration/strategies/horovod/test_horovod_gpu.py``) plus the CPU tests over Gloo are what runs.
"""

from __future__ import annotations

import json
import sys
import time


def main(out: str) -> None:
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.cuda.set_device(0)
    row = {"rank": hvd.rank(), "size": hvd.size(), "nccl_built": int(hvd.nccl_built())}
    start = time.perf_counter()
    try:
        got = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1), device="cuda"), op=hvd.Sum, name="probe")
        torch.cuda.synchronize()
        row |= {"ok": True, "sum": got.tolist(), "expected": float(sum(range(1, hvd.size() + 1)))}
    except Exception as err:  # the answer to record, whatever it is
        row |= {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
    row["seconds"] = round(time.perf_counter() - start, 3)
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

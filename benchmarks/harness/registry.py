"""Every benchmark of the suite: its script, suite, arguments at each size, and what it needs to run."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

SUITES = ("strategies", "memory", "callbacks", "data", "launchers")
SIZES = ("full", "quick", "dry")  # full: the committed report; quick: CI-sized (< 3 min here); dry: tests the harness


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script, run in its own process with ``--result PATH`` added.

    Attributes:
        name: unique, short; the report's section.
        suites: the suites it belongs to (``--suite``).
        script: file under ``benchmarks/``.
        what: one line for ``--list`` and the report.
        args: extra arguments per size (``full``, ``quick``, ``dry``).
        needs: importable modules it needs; without them it is skipped, saying so.
        timeout_s: per size, a hard bound on the run.
        gpu_args: added with ``run.py --gpu`` (its GPU variant); ``None``: the benchmark has none and is skipped there.
        gpus_needed: the GPUs its GPU variant needs; with fewer it is skipped, saying so.
        cpu_sizes: the sizes it runs at without ``--gpu``; a GPU-only benchmark runs on the CPU at dry size only,
            which tests its script.
    """

    name: str
    suites: tuple[str, ...]
    script: str
    what: str
    args: dict[str, list[str]] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    timeout_s: dict[str, float] = field(default_factory=lambda: {"full": 1800.0, "quick": 300.0, "dry": 240.0})
    gpu_args: list[str] | None = None
    gpus_needed: int = 1
    cpu_sizes: tuple[str, ...] = SIZES

    def missing(self) -> list[str]:
        """The needed modules that cannot be imported here."""
        return [m for m in self.needs if importlib.util.find_spec(m) is None]


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "ddp",
        ("strategies",),
        "bench_ddp.py",
        "ddp (Lightning) against a raw torch DDP loop, 2 ranks, and where DDP's communication time goes",
        {
            "full": ["--rounds", "7", "--steps", "20"],
            "quick": ["--rounds", "3", "--steps", "10"],
            "dry": ["--rounds", "1", "--steps", "2", "--warmup", "1", "--hidden", "64"],
        },
        gpu_args=["--accelerator", "gpu"],
        gpus_needed=2,  # two ranks, one GPU each (NCCL refuses a shared GPU)
    ),
    Benchmark(
        "sharded",
        ("strategies", "memory"),
        "bench_sharded.py",
        "sharded (FairScale) against ddp, a raw FairScale loop and raw FSDP2 (ZeRO-2): step time, model state, peak"
        " memory",
        {
            "full": ["--rounds", "7"],
            "quick": ["--rounds", "3", "--steps", "5", "--hidden", "768"],
            "dry": ["--rounds", "1", "--steps", "2", "--warmup", "1", "--hidden", "64"],
        },
        needs=("fairscale",),
        gpu_args=["--accelerator", "gpu"],
        gpus_needed=2,
    ),
    Benchmark(
        "sharded_checkpoint",
        ("memory",),
        "bench_sharded_checkpoint.py",
        "sharded_fsdp2's sharded checkpoints against one full file and raw torch.distributed.checkpoint: save and load"
        " seconds, peak RSS per rank (a 50M-parameter Adam model built on the meta device) against ddp's",
        {
            "full": ["--rounds", "7"],
            "quick": ["--rounds", "3", "--width", "1024"],
            "dry": ["--rounds", "2", "--width", "512", "--layers", "2"],
        },
        # On GPUs: sharded_fsdp2 against Lightning's FSDPStrategy(state_dict_type="sharded"), through the Trainer on
        # both.
        gpu_args=["--accelerator", "gpu"],
    ),
    Benchmark(
        "horovod",
        ("strategies",),
        "bench_horovod.py",
        "horovod against a raw Horovod loop and ddp, 2 Gloo workers under horovodrun",
        {
            "full": ["--rounds", "11", "--steps", "30"],
            "quick": ["--rounds", "3", "--steps", "10"],
            "dry": ["--rounds", "1", "--steps", "2", "--warmup", "1", "--hidden", "64"],
        },
        needs=("horovod",),
    ),
    Benchmark(
        "parity",
        ("strategies",),
        "bench_parity.py",
        "every strategy's parameters after k SGD steps against a raw torch DDP loop and one process on the global"
        " batch",
        {
            "full": ["--steps", "10"],
            "quick": ["--steps", "3", "--strategies", "ddp", "dp", "sharded"],
            "dry": ["--steps", "1", "--strategies", "ddp"],
        },
    ),
    Benchmark(
        "dp",
        ("strategies",),
        "bench_dp.py",
        "dp on one device against the bare LightningModule and a raw torch loop",
        {
            "full": ["--rounds", "9"],
            "quick": ["--rounds", "3", "--steps", "10"],
            "dry": ["--rounds", "1", "--steps", "2", "--warmup", "1"],
        },
        gpu_args=[
            "--accelerator",
            "gpu",
        ],  # one GPU: dp against the bare model; two or more: dp against ddp, memory per GPU
    ),
    Benchmark(
        "scaling",
        ("strategies",),
        "bench_scaling.py",
        "throughput at N devices against N x one device (weak scaling) for ddp, sharded and, on GPUs, dp",
        {
            "full": ["--rounds", "5"],
            "quick": ["--rounds", "2", "--steps", "10"],
            "dry": ["--rounds", "1", "--steps", "2", "--warmup", "1", "--hidden", "64", "--strategies", "ddp"],
        },
        gpu_args=["--accelerator", "gpu"],
        gpus_needed=2,  # 1, 2, 4, ... GPUs
    ),
    Benchmark(
        "gpu_monitor",
        ("callbacks",),
        "bench_gpu_monitor.py",
        "GPUUtilizationMonitor against no callback and Lightning's DeviceStatsMonitor, at a step of about 4 ms",
        {
            "full": ["--rounds", "9", "--width", "1024", "--batch-size", "64"],
            "quick": ["--rounds", "3", "--steps", "60"],
            "dry": ["--rounds", "1", "--steps", "5", "--warmup", "2"],
        },
        # On the GPU, with real NVML, at a step of about 4 ms again: the CPU's shapes take well under 1 ms of GPU work,
        # so Lightning's own per-step overhead would set the pace. The work grows with the width, not the batch: a
        # large batch (2048 x 4096) was input-bound on an H200 (TensorDataset collates sample by sample, 60-80 ms a
        # step) and took 55 s a round. 8192 x 128: ~100 GFLOP of fp32 a step, 1.3 GB of inputs in host memory.
        gpu_args=["--width", "8192", "--batch-size", "128"],
    ),
    Benchmark(
        "activation_checkpointing",
        ("callbacks", "memory"),
        "bench_activation_checkpointing.py",
        "ActivationCheckpointing (every block, every second block) against none and against torch.utils.checkpoint by"
        " hand: peak activation memory and step time",
        {
            "full": ["--repeats", "9", "--device", "cpu"],
            "quick": ["--repeats", "3", "--depth", "8", "--device", "cpu"],
            "dry": ["--repeats", "1", "--depth", "2", "--model", "mlp", "--device", "cpu"],
        },
        gpu_args=["--device", "all"],  # later arguments win: the CPU and the CUDA variants
    ),
    Benchmark(
        "amp",
        ("callbacks",),
        "bench_amp.py",
        "bf16 and fp16 mixed precision against fp32 and TF32: step time, achieved TFLOPS against the device's peak,"
        " and Lightning + AutoMixedPrecision against a raw autocast loop",
        {
            "full": ["--rounds", "5"],
            "quick": ["--rounds", "3", "--steps", "5"],
            "dry": [
                "--rounds",
                "1",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--width",
                "64",
                "--depth",
                "2",
                "--tokens",
                "64",
                "--device",
                "cpu",
                "--arms",
                "fp32,fp16,raw_fp16",
            ],
        },
        gpu_args=["--device", "cuda"],
        cpu_sizes=("dry",),  # the figures mean something on a GPU only
    ),
    Benchmark(
        "starved_gpu",
        ("data", "callbacks"),
        "bench_starved_gpu.py",
        "JPEG decoding in __getitem__ against preprocess's cache under GPUUtilizationMonitor: its verdict, utilisation,"
        " data wait and samples/s, and both runs' dashboards",
        {
            "full": ["--size", "cpu", "--device", "cpu"],
            "quick": ["--size", "cpu", "--device", "cpu"],
            "dry": ["--size", "cpu", "--device", "cpu", "--steps", "8"],
        },
        needs=("PIL",),
        gpu_args=["--size", "gpu", "--device", "cuda"],
    ),
    Benchmark(
        "real_models",
        ("strategies",),
        "bench_real_models.py",
        "ResNet-50 and GPT-2 small in bf16-mixed under ddp, dp, sharded_fsdp2, horovod, with ActivationCheckpointing"
        " and with GPUUtilizationMonitor, each against the same model in a plain torch loop: step time and MFU",
        {"dry": ["--device", "cpu", "--size", "tiny", "--rounds", "1", "--steps", "2", "--warmup", "1"]},
        # Two rounds: 32 fits, about 2.5 minutes on an H100, inside the few minutes a lent GPU has for the whole check.
        gpu_args=["--device", "cuda", "--size", "full", "--rounds", "2"],
        cpu_sizes=("dry",),  # the figures mean something on a GPU only
    ),
    Benchmark(
        "preprocess",
        ("data",),
        "bench_preprocess.py",
        "preprocess with processes (and Ray) against serial, litdata and Hugging Face datasets; cold first calls;"
        " cached epoch against on-the-fly",
        {
            "full": [],
            "quick": [
                "--samples",
                "400",
                "--repeats",
                "2",
                "--skip-ray",
                "--skip-litdata-fork",
                "--skip-epochs",
                "--cold-samples",
                "400",
                "--cold-repeats",
                "1",
            ],
            "dry": [
                "--samples",
                "40",
                "--repeats",
                "1",
                "--skip-ray",
                "--skip-litdata",
                "--skip-hf",
                "--skip-epochs",
                "--cold-samples",
                "",
            ],
        },
    ),
    Benchmark(
        "launchers",
        ("launchers",),
        "bench_launchers.py",
        "examples/train.py under Lightning's launcher, torchrun, Ray Train and horovodrun: cost per sample, start-up",
        {
            "full": ["--rounds", "5"],
            "quick": ["--rounds", "1", "--epochs", "2", "--arms", "lightning,torchrun"],
            "dry": ["--rounds", "1", "--epochs", "1", "--arms", "lightning,torchrun"],
        },
    ),
)


def select(suites: list[str] | None = None, only: list[str] | None = None) -> list[Benchmark]:
    """The benchmarks in any of ``suites`` (all when empty), narrowed to the names in ``only``.

    Raises:
        ValueError: an unknown suite or benchmark name (the message lists the valid ones).
    """
    unknown = sorted(set(suites or []) - set(SUITES))
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; choose from {list(SUITES)}")
    names = {b.name for b in BENCHMARKS}
    unknown = sorted(set(only or []) - names)
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {sorted(names)}")
    chosen = [b for b in BENCHMARKS if not suites or set(b.suites) & set(suites)]
    return [b for b in chosen if not only or b.name in only]

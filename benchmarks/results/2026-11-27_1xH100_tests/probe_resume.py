"""Probe: where a resumed run departs from an uninterrupted one (train.py, 1 device, end-of-epoch resume).

python probe_resume.py ACCEL OUTDIR [train.py args...]
Runs A (reference, 3 epochs), P (1 epoch), B (P's last.ckpt resumed to 3 epochs), logging per-step digests of
params, grads, buffers and optimizer state; prints the first step where they differ.
"""
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

accel, out = sys.argv[1], Path(sys.argv[2])
extra = sys.argv[3:]
spec = importlib.util.spec_from_file_location("train_mod", "examples/train.py")
T = importlib.util.module_from_spec(spec); spec.loader.exec_module(T)

def digest(ts):
    h = hashlib.sha1()
    for t in ts:
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:10]

class StepLog(Callback):
    def __init__(self, path): self.f = open(path, "w")
    def _w(self, **kw): self.f.write(json.dumps(kw) + "\n"); self.f.flush()
    def _opt(self, trainer):
        st = trainer.optimizers[0].state
        return digest([v for s in st.values() for k, v in sorted(s.items()) if torch.is_tensor(v)])
    def on_train_start(self, trainer, m):
        self._w(ev="start", step=trainer.global_step, p=digest(m.parameters()), b=digest(m.buffers()), o=self._opt(trainer),
                cudnn=[torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
                       torch.backends.cuda.matmul.allow_tf32, torch.are_deterministic_algorithms_enabled()],
                steps=[str((k, v.device, v.dtype)) for s in list(trainer.optimizers[0].state.values())[:1] for k, v in s.items() if torch.is_tensor(v)],
                cuda_rng=(digest([torch.cuda.get_rng_state().float()]) if torch.cuda.is_initialized() else None),
                cpu_rng=digest([torch.get_rng_state().float()]))
    def on_train_batch_start(self, trainer, m, batch, i):
        self._w(ev="batch", step=trainer.global_step, x=digest([batch[0]]), y=digest([batch[1]]), p=digest(m.parameters()), b=digest(m.buffers()))
    def on_before_optimizer_step(self, trainer, m, opt):
        self._w(ev="grad", step=trainer.global_step, g=digest([p.grad for p in m.parameters()]))
    def on_train_batch_end(self, trainer, m, outputs, batch, i):
        self._w(ev="end", step=trainer.global_step, p=digest(m.parameters()), b=digest(m.buffers()), o=self._opt(trainer), loss=float(outputs["loss"]))

orig = T.build_callbacks
def run(name, *more, epochs="3"):
    def bc(args):
        return [*orig(args), StepLog(out / f"{name}.jsonl")]
    T.build_callbacks = bc
    T.main(["--strategy", "ddp", "--devices", "1", "--accelerator", accel, "--max-epochs", epochs, "--logger", "none",
            "--optimizer", "adam", "--lr", "0.01", "--output-dir", str(out / name), *extra, *more])

out.mkdir(parents=True, exist_ok=True)
run("A")
run("P", epochs="1")
ck = out / "P" / "checkpoints" / "last.ckpt"
run("B", "--ckpt-path", str(ck))
rows = {n: [json.loads(l) for l in open(out / f"{n}.jsonl")] for n in "AB"}
startB = next(r for r in rows["B"] if r["ev"] == "start")
print("B start:", startB)
s0 = startB["step"]
endA = {r["step"]: r for r in rows["A"] if r["ev"] == "end"}
print("A end at step", s0, ":", endA.get(s0))
keyed = {n: {(r["ev"], r["step"]): r for r in rows[n] if r["step"] >= s0 and r["ev"] != "start"} for n in "AB"}
ndiff = 0
for k in sorted(keyed["B"], key=lambda k: (k[1], ["batch", "grad", "end"].index(k[0]))):
    a, b = keyed["A"].get(k), keyed["B"][k]
    if a != b:
        print("first difference at", k, "\n A:", a, "\n B:", b); ndiff += 1
        if ndiff >= 3: break
if not ndiff: print("B matches A at every step from", s0)

"""Which Lightning 1.x releases a file can have been written for, where its own text says so, and what that means for
a hook whose calls changed between 1.x releases.

``on_epoch_start``/``on_epoch_end`` (a LightningModule's and a Callback's) ran in different loops by release (read in
1.x's trainer and loops):

- 1.0-1.1: in training epochs only (``training_loop.py`` called them; the evaluation loop did not);
- 1.2.0-1.2.5: ``on_epoch_start`` in training only, ``on_epoch_end`` in training, validation and test;
- 1.2.6-1.7: both in every loop's epochs (training, validation, sanity check, test);
- 1.8 and later: neither (the Trainer refused a module that defined one), so a file that has one is 1.7 or older.

A file that names ``TrainResult``/``EvalResult`` can only have run on 1.0-1.1 (1.2 removed both classes, and their
import raises there): its hooks run in training only. Any other file's release is not known from its text ("log"
dicts returned from a step, 1.0's style, stayed in files that pinned 1.4), and is taken to be 1.3-1.7's, the releases
most files in the measured samples were written for (files with a 1.3-and-later spelling, such as ``strategy=``,
``torchmetrics`` or ``LightningCLI``, outnumber those with a 1.0-1.2 one about four to one).
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade.result_objects import RESULT_CLASSES
from lightning_mgpu.upgrade.traverse import read_only_visit


def epoch_hooks_train_only(module: cst.Module) -> bool:
    """Whether the file's ``on_epoch_start``/``on_epoch_end`` ran in training epochs only under the 1.x it was
    written for: True where it names ``TrainResult`` or ``EvalResult`` (1.0-1.1 only), False otherwise (1.3-1.7's
    every loop, the releases most files were written for).

    Args:
        module: the parsed file.

    Returns:
        True where the file can only be 1.0-1.1 code.
    """
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            nonlocal found
            # An import, an attribute (pl.TrainResult) or a bare use: any mention ties the file to 1.0-1.1.
            found = found or node.value in RESULT_CLASSES

    read_only_visit(module, Finder())
    return found

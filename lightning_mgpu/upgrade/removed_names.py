"""Names 2.0 removed outside the Trainer's arguments, and what the transformer writes instead.

- ``trainer.training_type_plugin`` (rule ``trainer-training-type-plugin``) is ``trainer.strategy`` since 1.6;
- ``trainer.root_gpu`` (rule ``trainer-root-gpu``) was ``trainer.strategy.root_device.index`` on a GPU and None
  otherwise, which is what ``root_device.index`` gives on the CPU too;
- ``pytorch_lightning.utilities.types.EPOCH_OUTPUT`` (rule ``epoch-output-type``) was ``List[STEP_OUTPUT]``: an
  annotation becomes ``list[STEP_OUTPUT]``, any other use ``STEP_OUTPUT`` (the import is renamed through
  :data:`lightning_mgpu.upgrade.rules.RENAMED_NAMES`);
- ``TestTubeLogger`` (rule ``test-tube-logger-args``) wrote TensorBoard files: it becomes ``TensorBoardLogger`` (the
  names through ``RENAMED_NAMES``; its arguments here).

Only attributes of a Trainer are touched: one bound from a Trainer, or named like one (``trainer``, ``self.trainer``,
``pl_trainer``), as :mod:`~lightning_mgpu.upgrade.trainer_owners` tells the caller.
"""

from __future__ import annotations

import libcst as cst

#: Trainer attributes 2.0 removed -> (what replaces ``.attr``, the rule).
TRAINER_ATTRIBUTES = {
    "training_type_plugin": ("strategy", "trainer-training-type-plugin"),
    "root_gpu": ("strategy.root_device.index", "trainer-root-gpu"),
}
#: TestTubeLogger's arguments that TensorBoardLogger does not take (test-tube's own; they changed no file's content).
TEST_TUBE_ONLY = frozenset({"description", "debug", "create_git_tag"})


def trainer_attribute(node: cst.Attribute, of_trainer: bool) -> tuple[cst.BaseExpression, str] | None:
    """``trainer.root_gpu`` -> ``trainer.strategy.root_device.index`` and ``trainer.training_type_plugin`` ->
    ``trainer.strategy``, with the rule; None for any other attribute.

    Args:
        node: an attribute (``x.attr``).
        of_trainer: whether ``x`` is a Trainer (:class:`~lightning_mgpu.upgrade.trainer_owners.TrainerOwners`).
    """
    entry = TRAINER_ATTRIBUTES.get(node.attr.value)
    if entry is None or not of_trainer:
        return None
    new, rule = entry
    result: cst.BaseExpression = node.value
    for part in new.split("."):
        result = cst.Attribute(value=result, attr=cst.Name(part))
    return result.with_changes(lpar=node.lpar, rpar=node.rpar), rule


def epoch_output_annotation(annotation: cst.Annotation, step_output: str) -> cst.Annotation:
    """An annotation that was ``EPOCH_OUTPUT`` (now the name ``step_output``): ``list[STEP_OUTPUT]``.

    Args:
        annotation: the annotation after the import's rename.
        step_output: the local name STEP_OUTPUT goes by.
    """
    element = cst.SubscriptElement(slice=cst.Index(value=cst.Name(step_output)))
    return annotation.with_changes(annotation=cst.Subscript(value=cst.Name("list"), slice=[element]))


def test_tube_arguments(call: cst.Call) -> tuple[cst.Call, list[str]] | None:
    """A ``TestTubeLogger(...)`` call's arguments as TensorBoardLogger takes them: test-tube's own arguments dropped,
    and ``name="default"`` (TestTubeLogger's default; TensorBoardLogger's is "lightning_logs") where the call gave no
    name, so that the logs land where they did.

    Args:
        call: the call (its function may already be renamed).

    Returns:
        The new call and the names of the dropped arguments; None where a third positional argument (test-tube's
        ``description``) or a ``**`` splat makes the arguments unreadable.
    """
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if len(positional) > 2 or any(a.star for a in call.args):
        return None
    kept = [a for a in call.args if a.keyword is None or a.keyword.value not in TEST_TUBE_ONLY]
    dropped = [a.keyword.value for a in call.args if a.keyword is not None and a.keyword.value in TEST_TUBE_ONLY]
    named = len(positional) == 2 or any(a.keyword is not None and a.keyword.value == "name" for a in kept)
    if not named:
        equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        kept.append(cst.Arg(keyword=cst.Name("name"), value=cst.SimpleString('"default"'), equal=equal))
    if len(kept) == len(call.args) and named:
        return call, dropped
    separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    last_comma = call.args[-1].comma if call.args else cst.MaybeSentinel.DEFAULT
    fixed = [a if isinstance(a.comma, cst.Comma) else a.with_changes(comma=separator) for a in kept[:-1]]
    fixed.append(kept[-1].with_changes(comma=last_comma))
    return call.with_changes(args=fixed), dropped

"""``ModelCheckpoint(prefix=P)`` (1.0-1.2) -> ``filename="P-..."`` (rule ``checkpoint-prefix-moved``).

1.x formatted the checkpoint's name from ``filename`` (default ``"{epoch}-{step}"``) and then joined the prefix in
front with ``CHECKPOINT_JOIN_CHAR`` (``-``): ``prefix="model_", filename="{epoch:02d}"`` wrote
``model_-epoch=03.ckpt``. It did the same to ``last.ckpt`` when ``save_last`` was on: ``model_-last.ckpt``. 2.x took
the prefix out; the same names come from ``filename="model_-{epoch:02d}"`` and, for the last checkpoint, the
callback's ``CHECKPOINT_NAME_LAST = "model_-last"`` (the attribute 2.x documents for that name).

Rewritten where the prefix and the filename are literals and the prefix holds no brace (1.x's prefix was never
formatted); an empty prefix changed nothing and goes (beside any filename, folder or ``**`` argument). Without a
filename the name depended on the release (1.0: ``{epoch}``, 1.1-1.2: ``{epoch}-{step}``), so the TODO stays. Where
``save_last`` may be on, the callback must be assigned to a name, for ``name.CHECKPOINT_NAME_LAST = ...`` to follow
it. Otherwise the ``checkpoint-prefix`` TODO stays.
"""

from __future__ import annotations

import libcst as cst

#: 1.x's ModelCheckpoint.CHECKPOINT_JOIN_CHAR.
JOIN = "-"


def _literal_string(node: cst.BaseExpression) -> str | None:
    return node.evaluated_value if isinstance(node, cst.SimpleString) else None  # type: ignore[return-value]


def _quoted(value: str) -> cst.SimpleString:
    return cst.SimpleString(repr(value) if '"' in value else f'"{value}"')


def moved_prefix(args: list[cst.Arg], assigned: bool) -> tuple[list[cst.Arg], str | None] | None:
    """A ModelCheckpoint call's arguments with ``prefix=`` folded into ``filename=``, and the name its last checkpoint
    had (``"P-last"``) where ``save_last`` may be on (None where it is off, or the prefix was empty); None where this
    cannot be done (the TODO stays).

    Args:
        args: the call's arguments (``prefix=`` among them).
        assigned: whether the call is assigned to a name (a statement after it can set ``CHECKPOINT_NAME_LAST``).
    """
    given = {a.keyword.value: a for a in args if a.keyword is not None}
    prefix = _literal_string(given["prefix"].value)
    kept = [a for a in args if a is not given["prefix"]]
    if prefix == "":  # 1.x joined nothing for an empty prefix, whatever the name and the folder
        return fix_last_comma(kept, args), None
    if prefix is None or "{" in prefix or "}" in prefix or "filepath" in given or any(a.star for a in args):
        return None
    filename_arg = given.get("filename")
    filename = _literal_string(filename_arg.value) if filename_arg is not None else None
    if filename_arg is None or not filename:
        return None  # 1.0's default name was "{epoch}", 1.1-1.2's "{epoch}-{step}": the era decides
    save_last = given.get("save_last")
    last_on = save_last is not None and not (
        isinstance(save_last.value, cst.Name) and save_last.value.value in ("False", "None")
    )
    if last_on and not assigned:
        return None
    new_name = _quoted(f"{prefix}{JOIN}{filename}")
    kept = [a.with_changes(value=new_name) if a is filename_arg else a for a in kept]
    return fix_last_comma(kept, args), f"{prefix}{JOIN}last" if last_on else None


def fix_last_comma(kept: list[cst.Arg], original: list[cst.Arg]) -> list[cst.Arg]:
    """The last argument keeps the call's own ending (a trailing comma or none), and the one before it a comma."""
    if not kept:
        return kept
    separator = next(
        (a.comma for a in original[:-1] if isinstance(a.comma, cst.Comma)),
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
    )
    fixed = [a if isinstance(a.comma, cst.Comma) else a.with_changes(comma=separator) for a in kept[:-1]]
    last = kept[-1].with_changes(comma=original[-1].comma, whitespace_after_arg=original[-1].whitespace_after_arg)
    return [*fixed, last]


def last_name_statement(name: str, last: str) -> cst.SimpleStatementLine:
    """``name.CHECKPOINT_NAME_LAST = "P-last"``: the name 1.x gave the last checkpoint."""
    target = cst.AssignTarget(cst.Attribute(value=cst.Name(name), attr=cst.Name("CHECKPOINT_NAME_LAST")))
    return cst.SimpleStatementLine([cst.Assign(targets=[target], value=_quoted(last))])

"""Whether a ``--reduce`` rule joins a result as NumPy computes it over the whole input.

:mod:`.rowwise` follows which names hold a value over a batch's rows; this module reads,
for each assignment, which rules join that value over the batches (its *tag*): a sum of the
rows by ``sum``, a mean by ``mean`` (weighted by rows), a maximum by ``max``, ``any`` by
``any``; a median, a standard deviation or a percentile by none; a total scaled by a
number keeps its rule, a total divided by the batch's row count is a mean. A rule that does
not join the value is refused for certain (``m = x.mean()`` with ``--reduce m=sum``), as
is a rule for a result that keeps a row per input row; where the check cannot tell what the
value is, a cell batched on its own stops.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from ..syncs.values import attr_path
from . import rowvocab as vocab
from .rowvocab import CLEAN, MIXED, NROWS, ROWS, Kind

__all__ = ["Tag", "rule_problem", "tag_of"]

Tag = frozenset[str] | None  # the rules that join the value; frozenset(): none; None: unknown
SUM, MEAN, MAX, MIN = (frozenset({r}) for r in ("sum", "mean", "max", "min"))
NONE: frozenset[str] = frozenset()
PLAIN = frozenset({"=plain"})  # no rows in it (a number)
ZERO = frozenset({"=zero", "=plain"})  # 0, 0.0, np.zeros(...): an accumulator's start
REDUCE_TAGS = {
    **dict.fromkeys(("sum", "nansum", "count_nonzero"), SUM),
    **dict.fromkeys(("mean", "nanmean", "average"), MEAN),
    **dict.fromkeys(("max", "amax", "nanmax"), MAX),
    **dict.fromkeys(("min", "amin", "nanmin"), MIN),
    "any": frozenset({"any", "max"}), "all": frozenset({"all", "min"}),
}
KEEPS = frozenset({"float", "complex", "asarray", "array", "float64", "float32", "item",
                   "astype", "copy", "squeeze", "ravel"})
_SWAP = {"max": "min", "min": "max", "sum": "sum", "mean": "mean"}


def tag_of(node: ast.expr, env: Mapping[str, Kind], tags: Mapping[str, Tag],
           kind: Callable[[ast.expr], Kind]) -> Tag:
    """The rules that join ``node``'s value over the batches (``kind`` reads a node's kind
    as the walker does, recording nothing)."""
    own = kind(node)[0]
    if own == ROWS:
        return None
    if own == CLEAN:
        return tags.get(node.id, PLAIN) if isinstance(node, ast.Name) else (
            ZERO if _zero(node) else PLAIN)
    if isinstance(node, ast.Name):
        return tags.get(node.id)
    if isinstance(node, ast.Call):
        return _call(node, env, tags, kind)
    if isinstance(node, ast.Attribute):
        return SUM if node.attr == "size" else None
    if isinstance(node, ast.Subscript):
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            return SUM  # x.shape[0]: a batch's rows, summed
        if isinstance(node.value, ast.Call) and attr_path(node.value.func)[-1:] == \
                ["histogram"] and vocab.axes_of(node.slice, None) == (0,):
            return SUM  # np.histogram(v, bins=10, range=(0, 1))[0]: counts in fixed bins
        return tag_of(node.value, env, tags, kind)  # an element of a total
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = tag_of(node.operand, env, tags, kind)
        return None if inner is None else frozenset(_SWAP[r] for r in inner if r in _SWAP)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.MatMult):
            transposed = isinstance(node.left, ast.Attribute) and node.left.attr == "T" \
                and kind(node.left.value)[0] == ROWS
            return SUM if transposed and kind(node.right)[0] == ROWS else None
        left, right = (tag_of(n, env, tags, kind) for n in (node.left, node.right))
        return _arith(node.op, left, right, kind(node.right)[0] == NROWS)
    return None


def _call(node: ast.Call, env: Mapping[str, Kind], tags: Mapping[str, Tag],
          kind: Callable[[ast.expr], Kind]) -> Tag:
    path = attr_path(node.func)
    name = node.func.attr if isinstance(node.func, ast.Attribute) else (path or [""])[-1]
    method = isinstance(node.func, ast.Attribute) and \
        kind(node.func.value)[0] in (ROWS, MIXED, NROWS)
    operand = node.func.value if method else (node.args[0] if node.args else None)
    if operand is None:
        return None
    if name == "len":
        return SUM
    if name == "bincount":  # counts; of a length each batch could choose, without minlength
        return SUM if any(k.arg == "minlength" for k in node.keywords) else NONE
    if name in KEEPS:
        return tag_of(operand, env, tags, kind)
    if name in REDUCE_TAGS or name in vocab.REDUCTIONS:
        rule = REDUCE_TAGS.get(name, NONE)
        if name == "average" and any(k.arg == "weights" for k in node.keywords):
            rule = NONE
        if kind(operand)[0] == ROWS:
            return rule
        inner = tag_of(operand, env, tags, kind)  # a reduction of a total
        return None if inner is None else rule & inner
    if name in ("dot", "matmul") and len(path) >= 2:
        return None
    from_xp = len(path) >= 2 and (path[0] in vocab.XP_NAMES or path[0] in vocab.ARRAY_MODULES)
    return NONE if from_xp or method else None  # np.sqrt(total): no rule joins it


def _arith(op: ast.operator, left: Tag, right: Tag, by_rows: bool) -> Tag:
    """The tag of ``left op right`` (``by_rows``: the right operand is a batch's row count)."""
    if left is None or right is None:
        return None
    if "=zero" in left and isinstance(op, ast.Add):
        return right
    if "=zero" in right and isinstance(op, (ast.Add, ast.Sub)):
        return left
    plain_l, plain_r = "=plain" in left, "=plain" in right
    if plain_l and plain_r:
        return PLAIN
    if plain_l or plain_r:
        total, other_first = (right, True) if plain_l else (left, False)
        if isinstance(op, (ast.Mult, ast.Div)) and not (other_first and isinstance(op, ast.Div)):
            return total & {"sum", "mean"}  # scaled by a number (a sign may swap max and min)
        if isinstance(op, (ast.Add, ast.Sub)):
            if other_first and isinstance(op, ast.Sub):
                total = frozenset(_SWAP[r] for r in total if r in _SWAP)
            return total & {"mean", "max", "min"}  # shifted by a number
        return NONE
    if isinstance(op, (ast.Add, ast.Sub)):
        return left & right & {"sum", "mean"}
    if isinstance(op, ast.Div) and by_rows and "sum" in left and right == SUM:
        return MEAN  # a total over a batch's row count: its mean
    return NONE


def _zero(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == 0 and not isinstance(node.value, (bool, str))
    path = attr_path(node.func) if isinstance(node, ast.Call) else []
    return bool(path) and path[-1] in ("zeros", "zeros_like")


def rule_problem(name: str, rule: str, kind: Kind, tag: Tag) -> tuple[str, bool] | None:
    """What is wrong with ``--reduce name=rule`` for a result of ``kind`` and ``tag``, and
    whether that is certain; ``None`` where the rule joins it."""
    fix = f"--reduce {name}={rule}"
    if kind[0] == ROWS:
        if rule == "concat" or tag is None:
            return None
        return (f"keeps a row per input row, which the batched run gathers; {fix} would join "
                f"the batches' rows instead: drop {name} from --reduce"), True
    if kind[0] == CLEAN:
        return (f"gives {name} a value the check does not see depend on the rows, which "
                f"{fix} would join as many times as there are batches"), False
    if kind[0] not in (MIXED, NROWS) or tag is None:
        return (f"gives {name} a value over each batch's rows that the check cannot tell "
                f"{fix} joins as NumPy computes it over all rows"), False
    if rule in tag:
        return None
    rules = sorted(r for r in tag if not r.startswith("="))
    if not rules:
        return (f"gives {name} a value over each batch's rows that no --reduce rule joins "
                f"into the whole input's ({fix} would give another value): compute it in a "
                "cell of its own, run whole"), True
    return (f"gives {name} a value over each batch's rows that {fix} does not join as NumPy "
            f"computes it over all rows; --reduce {name}={rules[0]} does"), True

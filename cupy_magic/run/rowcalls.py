"""Calls :mod:`.rowwise` knows mix the rows whatever their arguments' axes: random draws
(each batch draws its own numbers), prints of a batch's values, and NumPy functions that
read across rows (:data:`.rowvocab.MIXERS`). The walker (:class:`.rowwise._Walker`) asks
:meth:`Calls.special` before it reads a call the usual way."""

from __future__ import annotations

import ast

from . import rowvocab as vocab
from .rowvocab import CLEAN, MIXED, NROWS, RNG, ROWS, Kind

__all__ = ["DRAW_WHY", "Calls"]

DRAW_WHY = ("draws random numbers in every batch: the batches' draws are not the numbers of one "
            "run (with a seed, every batch draws the same numbers again); draw them over all "
            "rows in a cell of their own (noise = rng.normal(size=x.shape)) and batch them "
            "with x")


class Calls:
    """What a walker does with the calls it knows mix rows; it gives ``expr`` and ``mix``."""

    aliases: dict[str, str]
    functions: dict[str, ast.FunctionDef]
    random_modules: set[str]

    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        raise NotImplementedError

    def special(self, node: ast.Call, path: list[str], from_xp: bool, args: list[Kind],
                kwargs: dict[str | None, Kind], env: dict[str, Kind]) -> Kind | None:
        """The kind of a call that draws, prints or mixes rows (``None``: not one of them)."""
        func = node.func
        name = path[-1] if path else ""
        kinds = [*args, *kwargs.values()]
        drawn = self.random_path(func, path)
        if drawn is not None:
            if drawn in vocab.RNG_MAKERS:
                return (RNG, None)
            return (CLEAN, None) if drawn == "seed" else self.mix(node, DRAW_WHY)
        if isinstance(func, ast.Attribute) and self.expr(func.value, env)[0] == RNG:
            return self.mix(node, DRAW_WHY)  # rng.normal(...): a generator's draw
        if isinstance(func, ast.Name) and name == "print" and name not in self.functions \
                and any(k[0] not in (CLEAN, RNG) for k in kinds):
            return self.mix(node, "prints a batch's values: each batch prints its own, not "
                            "the whole input's")
        if from_xp and name == "bincount" and any(k[0] == ROWS for k in kinds):
            return (MIXED, None)  # counts over the batch's rows: no row axis
        if from_xp and name in vocab.MIXERS and any(k[0] in (ROWS, MIXED, NROWS)
                                                   for k in kinds):
            binned = _binned(node)
            if name == "histogram" and binned is None:
                return self.mix(node, f"{'.'.join(path)} takes bins= from a name: where it "
                                "holds a count, each batch chooses bins by its own minimum "
                                "and maximum", certain=False)
            if name == "histogram" and binned:
                return (MIXED, None)  # counts in fixed bins: a --reduce sum joins them
            return self.mix(node, f"{'.'.join(path)} {vocab.MIXERS[name]}")
        return None

    def random_path(self, func: ast.expr, path: list[str]) -> str | None:
        """The np.random function a call names (``None``: not one)."""
        if isinstance(func, ast.Name) and self.aliases.get(func.id, "").startswith("random."):
            return self.aliases[func.id].removeprefix("random.")
        if len(path) >= 2 and path[0] in self.random_modules:
            return path[-1]
        if len(path) >= 3 and path[-2] == "random" and path[0] in (*vocab.XP_NAMES,
                                                                 *vocab.ARRAY_MODULES):
            return path[-1]
        return None


def _binned(node: ast.Call) -> bool | None:
    """Whether a histogram's bins are fixed by the call (range= given, or the bin edges);
    ``None`` where bins= is a name, which may hold edges or a count."""
    words = {k.arg: k.value for k in node.keywords}
    bins = words.get("bins", node.args[1] if len(node.args) > 1 else None)
    if "range" in words or len(node.args) > 2:
        return True
    if bins is None or isinstance(bins, ast.Constant):
        return False  # a count, or a rule ('auto') over a batch's values
    return None if isinstance(bins, ast.Name) else True

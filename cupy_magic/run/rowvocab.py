"""The words and kinds :mod:`.rowwise` works with: which NumPy/CuPy functions and array
methods keep a batch's rows apart, which reduce or reorder along an axis; what a value is to
the check (rows, a value over the rows, a row count, a shape), and how two combine."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

__all__ = ["ARRAY_MODULES", "AXIS_SECOND", "CLEAN", "CLEAN_ATTRS", "CONSTRUCTORS", "ELEMENTWISE",
           "MIXED", "MIXERS", "NROWS", "NUMBERINGS", "REDUCTIONS", "RNG", "RNG_MAKERS", "ROWS",
           "ROW_ATTRS", "ROW_METHODS", "SCANS", "SHAPE", "XP_NAMES", "Kind", "RowMix", "axes_of"]


def _words(text: str) -> list[str]:
    return text.split()


# element-wise (or row-preserving with the same shape) functions of NumPy/CuPy and methods
ELEMENTWISE = frozenset(_words("""
abs absolute add angle arccos arccosh arcsin arcsinh arctan arctan2 arctanh around astype
bitwise_and bitwise_not bitwise_or bitwise_xor cbrt ceil clip conj conjugate copy copysign
cos cosh deg2rad degrees divide empty_like equal exp exp2 expm1 fabs float_power floor
floor_divide fmax fmin fmod full_like greater greater_equal heaviside hypot i0 imag invert
isclose isfinite isinf isnan isneginf isposinf ldexp left_shift less less_equal log log10
log1p log2 logaddexp logaddexp2 logical_and logical_not logical_or logical_xor maximum
minimum mod multiply nan_to_num negative nextafter not_equal ones_like positive power
rad2deg radians real real_if_close reciprocal remainder right_shift rint round sign signbit
select sin sinc sinh sqrt square subtract column_stack tan tanh true_divide trunc where
zeros_like
erf erfc erfinv erfcinv ndtr ndtri log_ndtr expit logit gamma gammaln digamma
"""))
# reductions and scans: (the axis's place among the positional arguments of the function
# form, its default); the method form takes the axis first
REDUCTIONS = {
    **dict.fromkeys(_words("sum mean std var min max amin amax prod product any all argmin argmax "
                    "nansum nanmean nanstd nanvar nanmin nanmax nanprod nanargmin nanargmax "
                    "median nanmedian ptp count_nonzero average cumsum cumprod nancumsum "
                    "nancumprod"), (1, None)),
    **dict.fromkeys(_words("percentile quantile nanpercentile nanquantile"), (2, None)),
    **dict.fromkeys(_words("sort argsort"), (1, -1)), "diff": (2, -1), "flip": (1, None),
    "norm": (2, None), "roll": (2, None), "unique": (9, None), "concatenate": (1, 0),
    "stack": (1, 0), "vstack": (9, 0), "row_stack": (9, 0), "trapezoid": (3, -1),
    "trapz": (3, -1), "partition": (2, -1), "argpartition": (2, -1),
    **dict.fromkeys(_words("fft ifft rfft irfft hfft ihfft"), (2, -1)),
}
AXIS_SECOND = frozenset({"partition", "argpartition"})  # x.partition(kth, axis): 2nd
SCANS = frozenset(_words("cumsum cumprod nancumsum nancumprod sort argsort diff flip unique roll "
                  "concatenate stack vstack partition argpartition fft ifft rfft irfft hfft "
                  "ihfft"))
ARRAY_MODULES = frozenset({"numpy", "cupy", "scipy", "cupyx"})
CLEAN_ATTRS = frozenset({"dtype", "ndim", "itemsize", "flags"})
ROW_ATTRS = frozenset({"real", "imag"})
ROW_METHODS = frozenset({"get", "dot"})  # x.dot(w): rows of x, as x @ w
# functions that read across the rows of what they are given, with no --reduce rule that
# joins the batches' results into the whole's (np.histogram: only where a batch's values
# choose the bins; .rowwise reads range= and bins=)
MIXERS = {
    "convolve": "convolves along the rows: each batch's first and last rows miss their "
                "neighbours in the next batch",
    "correlate": "correlates along the rows: each batch's first and last rows miss their "
                 "neighbours in the next batch",
    "lexsort": "sorts the rows: a batch's order, not the input's",
    "cov": "computes a covariance over the rows: no --reduce rule joins the batches' "
           "covariances into the whole's",
    "corrcoef": "computes correlations over the rows: no --reduce rule joins the batches' "
                "correlations into the whole's",
    "histogram": "bins a batched input by its own minimum and maximum: each batch would "
                 "choose other bins (give range= or the bin edges, then --reduce COUNTS=sum)",
    "histogram_bin_edges": "chooses bins from a batch's own values: each batch would choose "
                           "other bins",
}
# np.random names that make a generator or set a seed; every other np.random call draws
RNG_MAKERS = frozenset({"default_rng", "RandomState", "Generator", "PCG64", "PCG64DXSM",
                        "MT19937", "Philox", "SFC64", "SeedSequence", "BitGenerator"})


def axes_of(axis: ast.expr | None, default: int | None) -> tuple[int, ...] | None:
    """The axes a literal ``axis=`` names (``()`` for None: all); None when not a literal."""
    if axis is None:
        return () if default is None else (default,)
    if isinstance(axis, ast.Constant) and axis.value is None:
        return ()
    if isinstance(axis, ast.UnaryOp) and isinstance(axis.op, ast.USub) and \
            isinstance(axis.operand, ast.Constant) and isinstance(axis.operand.value, int):
        return (-axis.operand.value,)
    if isinstance(axis, ast.Constant) and isinstance(axis.value, int):
        return (axis.value,)
    if isinstance(axis, ast.Tuple):
        parts = [axes_of(e, None) for e in axis.elts]
        if all(p is not None and len(p) == 1 for p in parts):
            return tuple(p[0] for p in parts if p)
    return None


CLEAN, ROWS, SHAPE, MIXED = "clean", "rows", "shape", "mixed"
RNG = "rng"  # a random generator: each batch would draw its own numbers from it
NROWS = "nrows"  # a batch's row count (len(x), x.shape[0]): over the rows, but it sizes arrays
XP_NAMES = ("np", "numpy", "cp", "cupy")
CONSTRUCTORS = frozenset({"zeros", "ones", "empty", "full"})
# np.arange(len(x)), np.linspace(0, 1, len(x)): values that number a batch's rows, from the
# start again in every batch; not the input's row numbers
NUMBERINGS = frozenset({"arange", "linspace", "logspace", "geomspace"})
Kind = tuple[str, int | None]  # (CLEAN|ROWS|SHAPE|MIXED, number of dimensions if known)


@dataclass(frozen=True)
class RowMix:
    """One place in a cell where a batch would read across rows."""

    line: int  # 1-based line in the cell source
    code: str  # the stripped source line
    why: str  # what it does to the rows
    certain: bool  # known to mix rows (False: the check cannot see into it)

    def describe(self) -> str:
        """The place as one line for an error or a report."""
        return f"line {self.line} `{self.code}` {self.why}"


def _join(a: Kind, b: Kind, node: ast.AST | None = None, walker: Any = None) -> Kind:
    kinds = {a[0], b[0]}
    if kinds == {NROWS} or kinds == {NROWS, CLEAN}:
        return (NROWS, None)  # len(x) + 1: still a batch's count
    kinds = {MIXED if k == NROWS else k for k in kinds}
    if MIXED in kinds and ROWS in kinds and walker is not None and node is not None:
        return walker.mix(node, "combines a value over the rows (a total, a length, one row) "
                          "with a batch's rows: each batch would use its own")
    if MIXED in kinds:
        return (MIXED, None)
    if SHAPE in kinds and walker is not None and node is not None:
        return walker.mix(node, "computes with the shape of a batched input: a batch's "
                          "shape, not the input's", certain=False)
    if ROWS in kinds:
        dims = [k[1] for k in (a, b) if k[0] == ROWS]
        return (ROWS, None if None in dims else max(d for d in dims if d is not None))
    return (CLEAN, None)


def _fold(kinds: list[Kind], node: ast.AST, walker: Any) -> Kind:
    out: Kind = (CLEAN, None)
    for k in kinds:
        out = _join(out, k, node, walker)
    return out


def _pairs(targets: list[ast.expr], value: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """``a, b = e1, e2``: each target with its own value (``[]`` where they do not pair)."""
    if len(targets) != 1 or not isinstance(value, (ast.Tuple, ast.List)):
        return []
    target = targets[0]
    if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) != len(value.elts) \
            or any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
        return []
    return list(zip(target.elts, value.elts, strict=True))

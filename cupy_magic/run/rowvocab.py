"""The words :mod:`.rowwise` knows: which NumPy/CuPy functions and array methods keep a
batch's rows apart, and which reduce or reorder along an axis."""

from __future__ import annotations

import ast

__all__ = ["ARRAY_MODULES", "CLEAN_ATTRS", "ELEMENTWISE", "REDUCTIONS", "ROW_ATTRS",
           "ROW_METHODS", "SCANS", "axes_of"]


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
sin sinc sinh sqrt square subtract column_stack tan tanh true_divide trunc where zeros_like
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
    **dict.fromkeys(_words("sort argsort diff flip gradient"), (1, -1)),
    "norm": (2, None), "roll": (2, None), "unique": (9, None), "concatenate": (1, 0),
    "stack": (1, 0), "vstack": (9, 0), "row_stack": (9, 0), "trapezoid": (3, -1),
    "trapz": (3, -1),
}
SCANS = frozenset(_words("cumsum cumprod nancumsum nancumprod sort argsort diff flip gradient roll "
                  "concatenate stack vstack"))
ARRAY_MODULES = frozenset({"numpy", "cupy", "scipy", "cupyx"})
CLEAN_ATTRS = frozenset({"dtype", "ndim", "itemsize", "flags"})
ROW_ATTRS = frozenset({"real", "imag"})
ROW_METHODS = frozenset({"get", "dot"})  # x.dot(w): rows of x, as x @ w


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

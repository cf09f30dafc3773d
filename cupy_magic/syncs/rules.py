"""Data tables for the static host-sync lint in :mod:`cupy_magic.syncs.lint`.

The CuPy facts here were read from the CuPy 14.2.0 sources and its API reference
(docs.cupy.dev): functions whose docstring warns "This function may synchronize the device",
and functions whose implementation copies a device value to the host (``.get()``, ``.item()``,
``int(...)`` of a device scalar, ``if (...).any():``) or whose output size depends on the data.
"""

from __future__ import annotations

#: Methods of a device array that copy it to the host; the value maps to the result kind.
COPYING_METHODS: frozenset[str] = frozenset({"get", "item", "tolist", "tobytes", "tofile", "dump"})

#: Methods of a device array that return a host value without syncing.
HOST_METHODS: frozenset[str] = frozenset({"__len__", "toDlpack", "__dlpack__", "__dlpack_device__"})

#: Array-module functions that return host objects (types, metadata, pools, streams).
HOST_XP_FUNCTIONS: frozenset[str] = frozenset(
    {
        "asnumpy",
        "result_type",
        "dtype",
        "iinfo",
        "finfo",
        "isscalar",
        "ndim",
        "shape",
        "size",
        "can_cast",
        "issubdtype",
        "promote_types",
        "min_scalar_type",
        "get_array_module",
        "get_default_memory_pool",
        "get_default_pinned_memory_pool",
        "show_config",
        "is_available",
        "bool_",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "intp",
    }
)

#: Sub-modules of the array module whose calls return host objects (streams, events, devices).
HOST_XP_SUBMODULES: frozenset[str] = frozenset({"cuda", "testing", "typing", "lib"})

#: Array-module functions that copy to the host or whose result size depends on the data, so
#: CuPy reads a count back from the device. Value: where the fact comes from.
SYNC_FUNCTIONS: dict[str, str] = {
    # Docstring warning "This function may synchronize the device" (CuPy 14.2 API reference).
    "nonzero": "docs",
    "flatnonzero": "docs",
    "compress": "docs",
    "extract": "docs",
    "place": "docs",
    "delete": "docs",
    "unique": "docs",
    "ix_": "docs",
    "unravel_index": "docs",
    "ravel_multi_index": "docs (mode='raise', the default)",
    "mask_indices": "docs",
    "asarray_chkfinite": "docs",
    "real_if_close": "docs",
    "histogram": "docs",
    "histogram2d": "docs",
    "histogramdd": "docs",
    "bincount": "docs",
    "nanmin": "docs",
    "nanmax": "docs",
    # cupy.random: qualified, because `cp.power` (a ufunc) does not sync.
    "random.exponential": "docs",
    "random.logseries": "docs",
    "random.negative_binomial": "docs",
    "random.noncentral_chisquare": "docs",
    "random.noncentral_f": "docs",
    "random.power": "docs",
    "random.rayleigh": "docs",
    "random.triangular": "docs",
    "random.weibull": "docs",
    "random.zipf": "docs",
    # Found in the sources: data-dependent output size, `.item()`, `.get()` or a truth test.
    "argwhere": "source: output size depends on the data",
    "trim_zeros": "source: .item() of the first non-zero index",
    "intersect1d": "source: unique and a boolean mask",
    "setdiff1d": "source: boolean mask",
    "setxor1d": "source: unique and a boolean mask",
    "union1d": "source: unique",
    "linalg.cond": "source: `if nan_mask.any():`",
    "asnumpy": "copies the array to the host",
    "save": "source: asnumpy",
    "savez": "source: asnumpy",
    "savetxt": "source: asnumpy",
    "array_repr": "source: asnumpy",
    "array_str": "source: asnumpy",
    "array2string": "source: asnumpy",
}

#: Functions that sync only with some arguments: name -> keyword that makes them sync.
SYNC_WITH_KEYWORD: dict[str, str] = {
    "choice": "p",  # cupy.random.choice validates `p` with .all() and .get()
    "average": "weights",  # docs: "may synchronize the device if weight is given"
    "array_equal": "equal_nan",  # source: `if not (a1nan == a2nan).all():`
}

#: Array-module functions that return a tuple or list of arrays: iterating over it is fine.
SEQUENCE_XP_FUNCTIONS: frozenset[str] = frozenset(
    {
        "split",
        "array_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "nonzero",
        "where",
        "unique",
        "meshgrid",
        "broadcast_arrays",
        "histogram",
        "gradient",
        "divmod",
        "modf",
        "frexp",
        "unravel_index",
    }
)

#: Attributes and methods that mark a function parameter as an array.
ARRAY_VOCABULARY: frozenset[str] = frozenset(
    {
        "shape",
        "dtype",
        "ndim",
        "size",
        "T",
        "sum",
        "mean",
        "max",
        "min",
        "std",
        "var",
        "prod",
        "any",
        "all",
        "argmax",
        "argmin",
        "argsort",
        "cumsum",
        "astype",
        "reshape",
        "ravel",
        "flatten",
        "dot",
        "clip",
        "get",
        "item",
        "tolist",
        "nonzero",
        "transpose",
    }
)

#: Array-module functions whose result has a bool dtype (used to spot mask indexing).
BOOL_XP_FUNCTIONS: frozenset[str] = frozenset(
    {
        "isnan",
        "isinf",
        "isfinite",
        "isclose",
        "isin",
        "in1d",
        "isreal",
        "iscomplex",
        "signbit",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "equal",
        "not_equal",
    }
)

#: Array-creation functions whose first argument is a shape or a length on the host.
SHAPE_FUNCTIONS: frozenset[str] = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "eye", "identity", "tri"}
)

#: Array methods whose arguments are shapes or axes on the host.
SHAPE_METHODS: frozenset[str] = frozenset({"reshape", "resize", "repeat"})

#: Builtins that iterate over their argument in Python.
ITERATING_BUILTINS: frozenset[str] = frozenset(
    {"list", "tuple", "set", "frozenset", "sorted", "sum", "max", "min", "any", "all", "iter"}
)
#: Builtins that iterate over every argument (zip) or over the second one (map, filter).
ITERATING_ALL_ARGS: frozenset[str] = frozenset({"zip", "enumerate"})
ITERATING_LATER_ARGS: frozenset[str] = frozenset({"map", "filter"})

#: Builtins that convert a device value to a Python scalar.
SCALAR_BUILTINS: frozenset[str] = frozenset({"float", "int", "bool", "complex", "round", "hex"})

#: NumPy's scalar types (the same classes in CuPy's namespace): one made from a device value
#: converts it to a host scalar, as ``float`` does.
SCALAR_TYPES: frozenset[str] = frozenset(
    {"float16", "float32", "float64", "half", "single", "double", "longdouble",
     "complex64", "complex128", "csingle", "cdouble", "int8", "int16", "int32", "int64",
     "uint8", "uint16", "uint32", "uint64", "intp", "uintp", "int_", "uint", "byte", "ubyte",
     "short", "ushort", "intc", "uintc", "long", "ulong", "longlong", "ulonglong", "bool",
     "bool_"}
)

#: Builtins that format a device value as text.
FORMAT_BUILTINS: frozenset[str] = frozenset({"repr", "str", "format", "ascii"})
#: Calls that print or display their arguments.
PRINT_CALLS: frozenset[str] = frozenset({"print", "display", "pprint"})

#: Module names whose calls plot their arguments.
PLOT_MODULES: frozenset[str] = frozenset({"plt", "pyplot", "matplotlib", "sns", "seaborn", "mpl"})
#: Calls that return figures or axes: names bound to their results plot too.
PLOT_FACTORIES: frozenset[str] = frozenset(
    {"subplots", "figure", "gca", "gcf", "subplot", "add_subplot", "axes", "twinx", "twiny"}
)
#: Conventional names of matplotlib figures and axes (`ax`, `ax2`, `axs`, `axes`, `fig`).
PLOT_NAME_PATTERN = r"^(ax|axs|axes|fig|figure)\d*$"

#: Where to look instead, by finding kind: (why it syncs, what to write instead).
ADVICE: dict[str, tuple[str, str]] = {
    "print": (
        "printing a device value copies it to the host",
        "print once after the loop (or print `.shape`/`.dtype`); keep per-step values on the"
        " device",
    ),
    "format": (
        "formatting a device value as text copies it to the host",
        "format a host copy once at the end (`v = cp.asnumpy(x)`), or format `.shape`/`.dtype`"
        " only",
    ),
    "truth-value": (
        "using a device value as a Python truth value copies it to the host",
        "keep the decision on the device: `cp.where(cond, a, b)`, `cp.any(...)`/`cp.all(...)`"
        " kept as arrays, or test once after the loop",
    ),
    "scalar-conversion": (
        "converting a device value to a Python number copies it to the host",
        "keep it as a 0-d device array (`m = x.max()`) and convert once at the end",
    ),
    "get": (
        "an explicit copy to the host waits for the GPU",
        "copy back once after the loop, or use `get(stream=s, out=pinned, blocking=False)`",
    ),
    "mask-index": (
        "boolean-mask indexing has a data-dependent size, so CuPy reads the count back",
        "keep the shape fixed: `cp.where(mask, x, 0)`, `(x * mask).sum()`, `mask.sum()`",
    ),
    "sync-function": (
        "this CuPy function may synchronize the device (data-dependent size or a host check)",
        "call it once outside loops, or use a fixed-size form: `cp.where(mask, x, y)`,"
        " `cp.count_nonzero` kept on the device",
    ),
    "iteration": (
        "iterating over a device array in Python copies one element at a time to the host",
        "vectorise: one array expression over the whole array (`x.sum()`, `x * 2`,"
        " `cp.where(...)`)",
    ),
    "loop-index": (
        "indexing one element per Python iteration launches a tiny GPU operation each time,"
        " and any use of it as a number copies it to the host",
        "vectorise: operate on the whole array or on slices, not element by element",
    ),
    "plot": (
        "matplotlib converts device arrays to NumPy, a copy to the host",
        "copy once with `cp.asnumpy(x)` before plotting, outside any loop",
    ),
}

"""A cell pasted from NumPy code, imports and all: ``import numpy as np``, ``from numpy import
linalg as LA``, ``from numpy.fft import fft`` inside a ``%%gpu`` cell give the cell's array
module (before, they rebound the names to NumPy and the cell ran on the CPU without a word);
the user namespace gets NumPy's own modules and functions back. Through a real shell."""

from __future__ import annotations

import numpy
import pytest

import cupy_magic
from cupy_magic.compat.proxy import ArrayModule


def test_imports_in_the_cell_give_the_array_module(ip, xp):
    for name in ("np2", "LA", "fft", "sqrt", "numpy"):
        ip.user_ns.pop(name, None)
    ip.run_cell_magic("gpu", "--quiet", "import numpy as np2\nimport numpy\n"
                      "from numpy import linalg as LA, sqrt\nfrom numpy.fft import fft\n"
                      "kinds = (type(np2).__name__, type(numpy).__name__, type(LA).__name__)\n"
                      "y = sqrt(np2.arange(4.0))\nn = LA.norm(y)\nf = fft(y)\n")
    ns = ip.user_ns
    assert ns["kinds"] == ("ArrayModule", "ArrayModule", "ArrayModule")
    assert all(isinstance(ns[n], xp.ndarray) for n in ("y", "f"))  # made by the array module
    assert float(ns["n"]) == pytest.approx(float(numpy.linalg.norm(numpy.sqrt(numpy.arange(4.)))))
    # outside the cell the names are NumPy's own again
    assert ns["np2"] is numpy and ns["numpy"] is numpy and ns["LA"] is numpy.linalg
    assert ns["sqrt"] is numpy.sqrt and ns["fft"] is numpy.fft.fft
    assert not any(isinstance(v, ArrayModule) for v in ns.values())


def test_functions_in_front_of_wrappers_are_numpys_own_outside(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet", "from numpy.random import default_rng\n"
                      "from numpy import hanning, arange, sum as total\n"
                      "rng = default_rng(0)\nn = total(arange(3))\n")
    ns = ip.user_ns
    assert ns["default_rng"] is numpy.random.default_rng  # not the cell's checked maker
    assert ns["hanning"] is numpy.hanning and ns["arange"] is numpy.arange
    assert ns["total"] is numpy.sum and int(ns["n"]) == 3


def test_an_imported_name_cupy_lacks_is_refused_like_np_dot_name(ip, cupy_names):
    ip.user_ns.pop("it", None)
    result = ip.run_cell("%%gpu\nfrom numpy import nditer\nit = nditer\n")
    assert str(result.error_in_exec).startswith("np.nditer at line 1 `from numpy import "
                                                "nditer`: CuPy has no nditer")
    assert "it" not in ip.user_ns


def test_other_imports_and_a_missing_numpy_name_behave_as_usual(ip):
    ip.run_cell_magic("gpu", "--quiet", "import math\nfrom collections import Counter\n"
                      "c = Counter('aab')['a'] + math.floor(1.5)\n")
    assert ip.user_ns["c"] == 3
    result = ip.run_cell("%%gpu\nimport numpy.not_a_module\n")
    assert isinstance(result.error_in_exec, ModuleNotFoundError)
    assert cupy_magic.last_report() is not None

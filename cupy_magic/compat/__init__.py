"""NumPy code under ``%%gpu``: the array module a cell sees, and what it cannot run.

Inside a cell ``np``, ``numpy`` and ``cp`` are an :class:`~cupy_magic.compat.proxy.ArrayModule`
in front of the backend's array module (CuPy on a GPU, NumPy on the CPU fallback). It passes
attributes through (``np.float32``, ``np.pi``, ``np.linalg``, ...) and wraps the functions:

- Python lists and tuples passed where NumPy documents an ``array_like`` become device arrays
  before the call, and the report counts them per cell line (:mod:`.record`).
- A call CuPy cannot run (a name it lacks, an option it has not implemented, a dtype it has
  not, NumPy-only code handed a device array) stops the cell with one line naming the
  function, the line, why, and the CuPy way to write it (:mod:`.advice`); or, under
  ``--fallback``, runs with NumPy on the host, its copies and time in the report.

Names and options are checked against CuPy's namespace and signatures (:mod:`.spec`) on both
backends, so the CPU fallback refuses what a GPU would. This part sits under ``run`` and
knows no backend: the cell gives it the array module and the way to move arrays.

Modules: ``spec.py`` (what NumPy and CuPy say about a function), ``advice.py`` (the one-line
messages and the table of CuPy ways), ``proxy.py`` (the module and its wrappers), ``calls.py``
(the slow path and the fallback), ``record.py`` (the report's rows).
"""

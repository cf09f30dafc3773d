"""A ``%%gpu`` cell on a Dask cluster: Dask (``distributed``, and ``dask-cuda`` for GPU
workers) is the engine; this part only turns a cell into one task per block and back.

``connect.py`` (the cluster in use: ``local``, an address or a ``Client``; what its workers
have), ``worker.py`` (what runs on a worker: the budget plugin, one block of a cell),
``inputs.py`` (the cell's Dask inputs, NumPy inputs chunked and scattered), ``execute.py``
(the run as a transaction: tasks, progress, failure, results, ``--reduce`` as Dask tree
reductions), ``report.py`` (the per-worker rows of the report). It knows no IPython.
"""

from __future__ import annotations

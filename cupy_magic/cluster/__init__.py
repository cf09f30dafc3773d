"""A ``%%gpu`` cell on a Dask cluster: Dask (``distributed``, and ``dask-cuda`` for GPU
workers) is the engine; this part only turns a cell into one task per block and back.

``connect.py`` (the cluster in use: ``local``, an address or a ``Client``; what its workers
have), ``worker.py`` (what runs on a worker: the budget plugin, one block of a cell),
``inputs.py`` (the cell's Dask inputs, NumPy inputs chunked and scattered), ``execute.py``
(the run as a transaction: tasks, progress, failure, results, ``--reduce`` as Dask tree
reductions), ``transport.py`` (how the blocks' data moves: shared memory on one host or
scatter and gather), ``shm.py`` (the kernel's ring of shared-memory slots), ``slots.py`` (a
worker's slots, a block run from one), ``pipeline.py`` (blocks through the slots, several in
flight), ``report.py`` (the per-worker rows of the report), ``failure.py`` (a failed or
interrupted run, as the kernel reports it), ``abandoned.py`` (blocks an interrupted cell left
running, which the next cell waits for). It knows no IPython.
"""

from __future__ import annotations

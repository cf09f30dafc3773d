"""One ``%%gpu`` cell as a transaction: plan, run (whole or in batches), commit, report.

``cell.py`` decides how a cell runs and is the entry (:func:`~cupy_magic.run.cell.run_cell`);
``plan.py`` finds its inputs and moves them; ``whole.py`` and ``batched.py`` run it;
``batching.py`` sizes the batches (pure logic) and ``reduce.py`` joins their partials;
``commit.py`` writes a successful cell back; ``errors.py`` is the one failure path;
``names.py`` reads the names a cell binds; ``report.py`` says what happened;
``progress.py`` is the running cell that the panel and the progress bar show.
Knows no IPython: the magics and :mod:`cupy_magic.session` are above it.
"""

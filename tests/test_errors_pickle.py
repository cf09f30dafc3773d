"""The extension's errors survive pickling whole: type, message and attributes (a cluster
worker's error reaches the kernel pickled; ``distributed`` sends a bare ``Exception`` of
the repr of one that does not unpickle)."""

from __future__ import annotations

import pickle

import pytest

from cupy_magic.backend.base import BudgetExceeded
from cupy_magic.cluster.failure import BlockCancelled
from cupy_magic.compat.advice import CupyLimit, MissingInCupy, NeedsGpu
from cupy_magic.syncs.record import HostSyncError

ERRORS = [
    CupyLimit("np.select at line 1: ...", function="np.select", line=1, kind="not-implemented",
              fix="np.where"),
    MissingInCupy("np.nditer at line 2: ...", function="np.nditer", line=2, kind="missing"),
    NeedsGpu("cp.cuda at line 3: ...", function="cp.cuda", line=None, kind="needs-gpu"),
    BudgetExceeded("over the VRAM budget", line=4, explained=True),
    HostSyncError(5, "float(x.sum())"),
    BlockCancelled("cupy-magic-1234-block-0"),
]


@pytest.mark.parametrize("error", ERRORS, ids=[type(e).__name__ for e in ERRORS])
def test_an_error_comes_back_from_pickling_as_it_was(error):
    error.add_note("a note a worker added")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert again.args == error.args and vars(again) == vars(error)
    assert again.__notes__ == ["a note a worker added"]

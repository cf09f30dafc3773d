"""Host syncs: the static check before a cell runs (``lint.py``, with the rules of what
syncs in ``rules.py`` and the device-value tracking in ``values.py``) and the runtime record
of the syncs CuPy declares while it runs (``record.py``)."""

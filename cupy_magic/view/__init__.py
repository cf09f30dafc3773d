"""What the notebook shows: the live VRAM panel (``panel.py``, drawn with ``sparkline.py``)
and the progress bar of a batched cell (``progressbar.py``)."""

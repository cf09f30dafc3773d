"""Sampling what the GPU and the pool do, for the panel: NVML (``nvml.py``, the only caller
of pynvml), the figures' sources (``sources.py``) and the sampler thread (``sampler.py``).
Knows no widgets: :mod:`cupy_magic.view` draws what it samples."""

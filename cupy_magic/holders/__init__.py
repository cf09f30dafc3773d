"""Who holds the memory (``%vram_who``): the arrays the user can reach and by which path,
the rest of the device memory part by part, and ``--free``.

``walk.py`` walks the namespace it is given (its names, IPython's ``Out`` and ``_``, the
last traceback; main thread only), ``records.py`` makes the records (each allocation
counted once), ``account.py`` measures the rest of the memory and remembers which cell made
each array, ``free.py`` drops holders and measures what came back. Knows no IPython: the
namespace is passed in, and the shell's own copies are dropped by :mod:`cupy_magic.session`.
"""

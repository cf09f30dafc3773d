"""IPython settings of the workshop kernel "Python 3 (cupy_magic)".

kernel.json passes this file to the kernel (``--config={resource_dir}/ipython_config.py``),
so it is read at kernel start, before the extension loads. Every setting is commented out
and shows its default: the kernel runs with the defaults until you uncomment a line and
restart the kernel. In a notebook, ``%config CupyMagic`` lists the settings with the values
in force, and ``%config CupyMagic.syncs = "error"`` changes one until the kernel restarts.
"""

c = get_config()  # noqa: F821 (IPython gives a configuration file get_config)

# A VRAM budget in force from load on: "8GB" (10^9 bytes), "1.5GiB" (2^30), "512MB", or a
# share of the device, "80%" or "0.5"; empty: no budget. A cell that needs more stops with
# BudgetExceeded. %vram_budget changes it later.
# c.CupyMagic.budget = ""

# What %%gpu cells do about lines that make the host wait for the GPU (print(x),
# if x.max() > 0:): "warn" reports them under the cell, "error" stops the cell at the first,
# "off" looks for none. --syncs on a cell and %gpu_syncs change it.
# c.CupyMagic.syncs = "warn"

# Where cells run: "auto" (CuPy when a GPU works, else NumPy on the CPU), "cupy" (the GPU,
# or the load fails saying why) or "host" (NumPy on the CPU). The environment variable
# CUPY_MAGIC_BACKEND wins over it; %gpu_backend switches later.
# c.CupyMagic.backend = "auto"

# CUDA streams of a batched %%gpu cell, i.e. batches in flight (1 to 64); --streams on a
# cell wins.
# c.CupyMagic.streams = 3

# Seconds between the VRAM panel's samples (0.05 to 3600); %vram_panel --interval wins.
# c.CupyMagic.panel_interval = 0.5

# Run with NumPy on the host the calls CuPy cannot run (names it lacks, options and dtypes it
# has not), their copies and time in the report; off, such a call stops the cell with the
# CuPy way to write it. %%gpu --fallback and %gpu_fallback on|off change it.
# c.CupyMagic.fallback = False

#!/usr/bin/env python3
"""Write the workshop notebooks 00 to 06 (without outputs) from the source below.

Usage: scripts/make_notebooks.py [--out DIR]      (default: notebooks/)

Edit the cells here, run this script, then run them with scripts/run-notebooks. Conventions:
every speed figure is printed by a cell, never written in the prose; sizes scale down when
`cupy_magic.device_info().backend` is not "cupy"; cells meant to fail carry the
`raises-exception` tag; solution cells are collapsed (`source_hidden` and `outputs_hidden`,
so a workshop leader reveals them) and tagged `solution`, and they run.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def md(text: str):
    return new_markdown_cell(_src(text))


def code(text: str, *tags: str):
    cell = new_code_cell(_src(text))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def fails(text: str):
    """A cell that is meant to raise (nbclient carries on past it)."""
    return code(text, "raises-exception")


def exercise(text: str):
    """The exercise's empty answer cell: it runs (comments only) so the notebook still runs."""
    return code(text, "exercise")


def solution(text: str):
    """A solution a workshop leader can reveal: collapsed in JupyterLab, and it runs."""
    cell = new_code_cell(_src(text))
    cell.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": True}
    cell.metadata["tags"] = ["solution"]
    return cell


def notebook(cells) -> nbformat.NotebookNode:
    for i, cell in enumerate(cells):
        cell.id = f"cell-{i:02d}"      # stable ids: regenerating gives no diff
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


# Shared by every notebook: load, say where and when it runs, and one timing helper.
SETUP = '''
%matplotlib inline
import time
import numpy as np
import matplotlib.pyplot as plt
import cupy_magic

info = cupy_magic.device_info()
ON_GPU = info.backend == "cupy"   # False on the CPU fallback: sizes below scale down
DEVICE = info.backend             # what %%gpu cells run on: "cupy" (GPU) or "host" (NumPy)
print(f"device: {info.name} [{info.backend}], {info.total_bytes / 2**30:.1f} GiB"
      + (f", driver {info.driver}, CuPy {info.cupy_version}" if ON_GPU else ""))
print("run on", time.strftime("%Y-%m-%d %H:%M %Z"))


def best_run(code, ns=None, repeat=3, warm=True, backend=None, key="gpu_seconds", **options):
    """Run `code` the way %%gpu does (cupy_magic.run_cell) and return the fastest report.

    warm: one untimed run first (kernel compilation, page-locking, pool growth).
    ns: the namespace (default: this notebook's variables). backend: "host" or "cupy".
    key: "gpu_seconds" (the cell's device time) or "wall_seconds" (everything, transfers too).
    """
    if backend is not None:
        cupy_magic.use_backend(backend)
    ns = globals() if ns is None else ns
    options.setdefault("syncs", "off")
    runs = [cupy_magic.run_cell(code, ns, **options) for _ in range(repeat + int(warm))]
    return min(runs[int(warm):], key=lambda r: getattr(r, key))
'''

# The first code cell of every notebook: it prints the device line (or why cells run on the
# CPU) on a plain python3 kernel and on the workshop kernel, which loads the extension at start
# (there %load_ext would only say "already loaded").
LOAD = '''
# Load cupy_magic: it prints one line, the GPU (or why cells run on NumPy on the CPU).
# %reload_ext also loads it where the kernel has already (the workshop kernel does).
%reload_ext cupy_magic
'''

SETUP_NOTE = md('''
`best_run` (defined above) is the engine of `%%gpu` called from Python
(`cupy_magic.run_cell`), so a loop can time many variants: it runs a cell a few times and keeps
the fastest report. `cupy_magic.use_backend("host")` is `%gpu_backend host`.
''')


# ---------------------------------------------------------------------------------------
# 00 tour
# ---------------------------------------------------------------------------------------

def nb00():
    return notebook([
        md('''
        # cupy_magic in ten minutes

        Moving NumPy code to the GPU is mostly about **data movement**: the PCIe bridge between
        host RAM and GPU memory is narrow, GPU memory is small, and harmless-looking Python can
        force the GPU to stop and copy data back. `cupy_magic` runs a cell on the GPU with CuPy
        and *shows* you what it cost: what moved, how fast, how long the GPU worked, and how
        much memory it took.

        This notebook runs on a GPU and, without one, on the CPU fallback (NumPy), with smaller
        sizes. Notebooks 01 to 05 teach each part in depth; 06 runs the same cells on a Dask
        cluster.
        '''),
        code(LOAD),
        code('''
        import time
        import numpy as np
        import cupy_magic

        info = cupy_magic.device_info()
        ON_GPU = info.backend == "cupy"
        N = 50_000_000 if ON_GPU else 2_000_000      # sizes scale down on the CPU fallback
        print(f"running on {info.name} ({info.backend}); N = {N:,}; {time.strftime('%Y-%m-%d %H:%M %Z')}")
        '''),
        md('''
        ## 1. Estimate before you allocate (guide 2B)

        VRAM (GiB) = elements x bytes per element / 1024³. The guide's example, a 20000 x 20000
        float32 matrix:
        '''),
        code("%vram_budget --estimate 20000x20000 float32"),
        code('''
        x = np.random.default_rng(0).random(N)          # a NumPy array on the host, float64
        %vram_budget --estimate x
        '''),
        md('''
        ## 2. Run a cell on the GPU

        Inside `%%gpu`, `np` means CuPy and the NumPy arrays the cell reads are copied to the
        device. The names the cell assigns come back when it succeeds, and stay **on the
        device** (guide 1: keep the data loop closed on the GPU). The report under the cell
        says what moved, how fast, the GPU time and the memory the cell took.

        The first cells of a session also compile CuPy's *kernels*, the small GPU programs
        behind each operation. The report's `compile` lines say how many, how long, on which
        lines and where they are kept for next time. The GPU time leaves the compiling out,
        but still counts loading new kernels onto the GPU at their first launch. (On the CPU
        fallback the same report speaks of host copies, CPU time and host memory instead.)
        '''),
        code('''
        %%gpu
        y = np.sqrt(x * x + 1)
        total = y.sum()
        '''),
        code('''
        print(type(x).__module__, type(y).__module__)   # x is still NumPy; y lives on the device
        r = cupy_magic.last_report()
        if ON_GPU:
            print(f"moved {r.moved_bytes / 1e6:.0f} MB over PCIe at {r.inputs[0].gbps:.1f} GB/s; "
                  f"the GPU worked {r.gpu_seconds * 1e3:.2f} ms; "
                  f"{len(r.compiles.compiled)} kernels compiled first, {r.compiles.seconds:.2f} s")
        else:
            print(f"copied {r.moved_bytes / 1e6:.0f} MB in host RAM (no PCIe on the CPU fallback); "
                  f"NumPy worked {r.gpu_seconds * 1e3:.2f} ms of CPU time")
        '''),
        md('''
        `--to-host` brings results back as NumPy arrays (all of them, or the names you list):
        '''),
        code('''
        %%gpu --to-host total
        y = np.sqrt(x * x + 1)
        total = y.sum()
        '''),
        code("type(total), float(total)"),
        md('''
        ## 3. float64 or float32? (guide 2A)

        `--dtype float32` converts float64 inputs on the way in: half the bytes over PCIe and in
        VRAM. The report's `in` line says how much it saved. Its time also counts the conversion
        on the host, so it can be longer than a plain upload (notebook 02 says more):
        '''),
        code('''
        %%gpu --dtype float32
        y32 = np.sqrt(x * x + 1)
        '''),
        code('''
        r = cupy_magic.last_report()
        print(f"{r.inputs[0].name}: {r.inputs[0].cast_from} -> {r.inputs[0].dtype}, saved {r.saved_bytes / 1e6:.0f} MB")
        '''),
        md('''
        ## 4. A VRAM budget

        `%vram_budget` sets a limit that CuPy's *memory pool* enforces (the pool keeps the GPU
        memory of freed arrays for reuse: notebook 05). A cell that needs more stops with a
        message that says what it asked for and what to try; your variables stay as they
        were. The second cell below is meant to fail:
        '''),
        code('''
        BUDGET = "2GB" if ON_GPU else "256MB"   # the GPU already holds the arrays made above
        %vram_budget $BUDGET
        '''),
        fails('''
        %%gpu
        big = np.ones((N, 32))   # far more than the budget: refused, nothing is committed
        '''),
        code('''
        print("big" in dir())
        %vram_budget off
        '''),
        md('''
        ## 5. Warm-up (guide 4B)

        The first call of a kernel compiles and initialises it. The report counts the compiles
        apart from the GPU time, but the wall time still pays for them. `--warmup` runs the cell
        once on a small slice first (its line says what it compiled), so the GPU time covers
        only the real run. The wall time still includes the warm-up.
        '''),
        code('''
        %%gpu --warmup
        z = np.tanh(x) ** 2 + np.cos(x)
        '''),
        md('''
        ## 6. Compare with the CPU

        `%gpu_backend host` runs the same cells with NumPy, so you can see what the GPU buys you
        on this machine (compute time only, warmed up):
        '''),
        code('''
        timings = {}
        for name in ["host", "cupy"] if ON_GPU else ["host"]:
            %gpu_backend $name
            get_ipython().run_cell_magic("gpu", "--quiet --warmup", "z = np.tanh(x) ** 2 + np.cos(x)")
            timings[name] = cupy_magic.last_report().gpu_seconds
        %gpu_backend {"cupy" if ON_GPU else "host"}
        for name, s in timings.items():
            print(f"{name:5}: {s * 1e3:8.2f} ms")
        '''),
        md('''
        ## 7. Host syncs (guide 4A)

        Harmless-looking Python forces the GPU to stop and copy data back: `print(y)`,
        `float(y)`, `if y.max() > 0:`. `%%gpu` finds these before the cell runs and, on a GPU,
        counts the ones that really happen, per line. This loop decides on the host at every
        step (`--warmup` keeps the kernels' compilation out of the time):
        '''),
        code('''
        %%gpu --warmup
        y = np.sqrt(x)
        for step in range(50):
            if y.max() > 0.5:      # the GPU stops here, every step
                y = y * 0.99
        '''),
        md('''
        The same decision kept on the device: `np.where` (CuPy's `where` inside `%%gpu`) picks
        the factor without asking the host, so nothing waits and the report has no sync line:
        '''),
        code('''
        %%gpu --warmup
        y = np.sqrt(x)
        for step in range(50):
            y = y * np.where(y.max() > 0.5, 0.99, 1.0)
        '''),
        md('''
        One run of each can mislead, so time both loops three times and keep the best (the
        reports are left out). On a GPU the loop that decides on the device does not wait.
        On the CPU fallback there is no GPU to wait for: both loops are NumPy on the CPU, the
        `np.where` form multiplies at every step, and its time can be the longer; there the
        lesson is the report's sync line, not the timing.
        '''),
        code('''
        loops = {"decides on the host": "y = np.sqrt(x)\\nfor step in range(50):\\n    if y.max() > 0.5:\\n        y = y * 0.99",
                 "decides on the device": "y = np.sqrt(x)\\nfor step in range(50):\\n    y = y * np.where(y.max() > 0.5, 0.99, 1.0)"}
        clock = "GPU time" if ON_GPU else "CPU time, NumPy (no GPU to wait for)"
        for label, loop in loops.items():
            best = min(cupy_magic.run_cell(loop, globals(), syncs="off").gpu_seconds for _ in range(3))
            print(f"{label:22} best of 3: {best * 1e3:8.2f} ms {clock}")
        '''),
        md('''
        ## Exercises

        **Exercise 1: estimate, then check.** How much VRAM does a 10000 x 10000 `complex128`
        array take? And how much would `x` take on the device as float32? Estimate both with
        `%vram_budget --estimate`, then check the second against the report of a
        `%%gpu --dtype float32` cell.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        print(cupy_magic.estimate("10000x10000", "complex128"))  # %vram_budget --estimate ... as a value
        print(cupy_magic.estimate(x.shape, "float32"))
        get_ipython().run_cell_magic("gpu", "--quiet --dtype float32", "x32 = x + 0")
        print(f"x32 on the device: {x32.nbytes / 1e6:,.0f} MB "
              f"(the report: {cupy_magic.last_report().inputs[0].nbytes / 1e6:,.0f} MB moved)")
        del x32
        '''),
        md('''
        **Exercise 2: bring back only what you need.** Compute the mean of `np.sin(x) ** 2` on
        the GPU and bring back only the mean, as a NumPy value, leaving the big intermediate
        array on the device.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        %%gpu --to-host m
        s2 = np.sin(x) ** 2
        m = s2.mean()
        '''),
        solution('''
        print(type(m).__module__, float(m), "|", type(s2).__module__, "(s2 stayed on the device)")
        del s2
        '''),
        md('''
        ## What you learned
        - `%%gpu` moves a cell's NumPy inputs to the GPU and reports the transfer and the GPU time.
        - Results stay on the device unless you ask for them with `--to-host`.
        - Estimate memory with `%vram_budget --estimate`; set a budget and read its errors.
        - `--dtype float32` halves memory and transfers; the report shows kernel compiling apart
          from the GPU time, and `--warmup` keeps it out of the timed run.
        - The report names the lines that make the host wait for the GPU, and what to write instead.
        '''),
    ])


# ---------------------------------------------------------------------------------------
# 01 host vs device
# ---------------------------------------------------------------------------------------

def nb01():
    return notebook([
        md('''
        # 01 Host and device: the narrow bridge

        A GPU has its own memory (VRAM). NumPy arrays live in the host's RAM, next to the CPU.
        Before the GPU can work on an array, the array must cross the **PCIe bus**, and the
        results must cross back:

        ```
          host: CPU + RAM  <==== PCIe (narrow) ====>  device: GPU + VRAM (wide, fast)
        ```

        The bridge is much narrower than the GPU's own memory. So a GPU pays off only when it
        does a lot of work for every byte that crosses (**compute density**), and data should
        stay on the device for the whole pipeline (a **closed data loop**). In this notebook you
        measure both on the machine you are using, and find where the GPU wins and where it
        loses.

        On a machine without a GPU, `%%gpu` cells run on NumPy (the *CPU fallback*): every cell
        still runs, with smaller sizes, but both sides of each comparison are then the CPU.
        '''),
        code(LOAD),
        code(SETUP),
        SETUP_NOTE,
        md('''
        ## 1. How narrow is the bridge?

        `x` is a NumPy array in host RAM. The `%%gpu` cell copies it to the device and makes a
        copy of it there. The report shows the transfer over PCIe (size, time, GB/s, and whether
        the host memory was *pinned*, that is page-locked, or *pageable*) and the time the device
        spent on the copy.
        '''),
        code('''
        N_BRIDGE = 2**28 if ON_GPU else 2**24   # float32: 1 GiB on a GPU, 64 MiB on the CPU fallback
        x = np.random.default_rng(0).random(N_BRIDGE, dtype=np.float32)
        print(f"x: {x.nbytes / 2**20:,.0f} MiB of float32 in host RAM")
        '''),
        code('''
        %%gpu
        y = x.copy()
        '''),
        md('''
        The first transfer of a large array also page-locks its host memory (notebook 05 says
        more), so we time a few more runs and keep the fastest. A device copy reads and writes
        every byte, so it moves `2 * x.nbytes` through device memory:
        '''),
        code('''
        r = best_run("y = x.copy()", {"np": np, "x": x})
        bridge = r.inputs[0].gbps
        device_copy = 2 * x.nbytes / r.gpu_seconds / 1e9
        if ON_GPU:
            print(f"over PCIe (host -> device): {bridge:8.1f} GB/s ({'pinned' if r.inputs[0].pinned else 'pageable'})")
            print(f"inside the device (copy):   {device_copy:8.1f} GB/s")
            print(f"the device's own memory is {device_copy / bridge:.1f}x faster than the bridge")
        else:   # the CPU fallback: no PCIe, no device; both figures are copies in host RAM
            print(f"host copy in (no PCIe here): {bridge:8.1f} GB/s")
            print(f"copy inside host RAM:        {device_copy:8.1f} GB/s (read and write)")
        del y
        '''),
        md('''
        On a GPU the last line is large: the device's memory is far faster than the bus that
        feeds it. Every array you send across costs far more time than reading it once on the
        device. On the CPU fallback both figures are copies within host RAM (the second counts
        each byte twice, read and write), so the ratio stays small.

        ## 2. When the GPU loses: small arrays, little work

        Take the cheapest possible work, `y = x * 2 + 1`, and vary the size. For each size we
        measure:

        - **host**: NumPy on the CPU (`%gpu_backend host`), compute time only;
        - **device, compute only**: the `%%gpu` cell's device time, as if the data were already there;
        - **device, with transfers**: upload, compute and download (`--to-host`): what it costs
          to send NumPy data to the GPU for this one operation.
        '''),
        code('''
        CHEAP = "y = x * 2.0 + 1.0"
        SIZES = [2**p for p in range(10, 27, 2)] if ON_GPU else [2**p for p in range(10, 23, 2)]
        sweep = []
        for n in SIZES:
            xn = np.random.default_rng(1).random(n, dtype=np.float32)
            host = best_run(CHEAP, {"np": np, "x": xn}, repeat=5, warm=False, backend="host")
            dev = best_run(CHEAP, {"np": np, "x": xn}, repeat=5, backend=DEVICE,
                           to_host=True, key="wall_seconds")
            sweep.append((xn.nbytes, host.gpu_seconds, dev.gpu_seconds, dev.wall_seconds))
        cupy_magic.use_backend(DEVICE)

        print(f"{'MiB':>9} {'host ms':>10} {'device ms':>10} {'+transfers ms':>14} {'host/(device+transfers)':>24}")
        for nbytes, h, d, w in sweep:
            print(f"{nbytes / 2**20:9.3f} {h * 1e3:10.3f} {d * 1e3:10.3f} {w * 1e3:14.3f} {h / w:24.2f}")
        wins = [nbytes for nbytes, h, d, w in sweep if w < h]
        if wins:
            print(f"with transfers, the device first beats the host at {wins[0] / 2**20:.3f} MiB")
        else:
            print("with transfers, the device never beat the host in this range")
        '''),
        code('''
        mib = np.array([s[0] for s in sweep]) / 2**20
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.loglog(mib, [s[1] * 1e3 for s in sweep], "o-", label="host: NumPy on the CPU")
        ax.loglog(mib, [s[2] * 1e3 for s in sweep], "s-", label=f"%%gpu on {info.name}: compute only")
        ax.loglog(mib, [s[3] * 1e3 for s in sweep], "^-", label=f"%%gpu on {info.name}: with transfers")
        ax.set_xlabel("array size (MiB of float32)")
        ax.set_ylabel("time (ms), lower is better")
        ax.set_title(f"y = x * 2 + 1 on {info.name}, {time.strftime('%Y-%m-%d')}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        plt.show()
        '''),
        md('''
        How to read the plot on a GPU: for tiny arrays the device lines are flat, because fixed
        costs (launching work on the device, a transfer's latency) dominate, and the host is
        fastest, even against the device's compute alone.

        As arrays grow, the device's compute-only line falls far below the host's. The line
        with transfers stays far above the compute-only one, within a small factor of the
        host's (the table's last column): for work this light, moving the data, not the
        arithmetic, sets the price. Of that price the way back is the larger part here: the
        result lands in new host memory, which the operating system must map page by page as
        it is written (exercise 2 measures the download).

        On the CPU fallback all three lines are NumPy, and the "with transfers" line pays for
        an extra copy.

        ## 3. When the GPU wins: compute density

        Now fix the size and raise the work done per element: `k` rounds of
        `sin(y) * 0.5 + 0.25` (three operations each). The bytes that cross the bridge stay the
        same; only the arithmetic grows.
        '''),
        code('''
        N_DENSE = 2**24 if ON_GPU else 2**20
        xd = np.random.default_rng(2).random(N_DENSE, dtype=np.float32)
        DENSE = """
        y = x
        for _ in range(k):
            y = np.sin(y) * 0.5 + 0.25
        """
        KS = [1, 2, 4, 8, 16, 32, 64]
        density = []
        for k in KS:
            host = best_run(DENSE, {"np": np, "x": xd, "k": k}, repeat=1, backend="host")
            dev = best_run(DENSE, {"np": np, "x": xd, "k": k}, repeat=3, backend=DEVICE,
                           to_host=True, key="wall_seconds")
            density.append((3 * k, host.gpu_seconds, dev.wall_seconds))
        cupy_magic.use_backend(DEVICE)

        print(f"{'ops/element':>12} {'host ms':>10} {'device+transfers ms':>20} {'speed-up':>9}")
        for ops, h, w in density:
            print(f"{ops:12d} {h * 1e3:10.2f} {w * 1e3:20.2f} {h / w:9.2f}")
        '''),
        code('''
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ops = [d[0] for d in density]
        ax.loglog(ops, [d[1] / d[2] for d in density], "o-", base=2,
                  label=f"host time / %%gpu time on {info.name} (with transfers)")
        ax.set_xticks(ops, [str(o) for o in ops])
        ax.minorticks_off()
        ax.axhline(1.0, color="grey", linestyle="--", label="break-even")
        ax.set_xlabel("operations per element (arithmetic intensity)")
        ax.set_ylabel("speed-up over NumPy on the CPU")
        ax.set_title(f"{xd.nbytes / 2**20:.0f} MiB of float32, {time.strftime('%Y-%m-%d')}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        plt.show()
        '''),
        md('''
        On a GPU the speed-up climbs with the operations per element: the transfer is paid once,
        and every extra operation is nearly free on the device but costs the CPU in full. This is
        the guide's rule: *a GPU pays off when the computation is much larger than the data
        moved*. On the CPU fallback both sides are NumPy: the curve wanders around 1, with no
        trend (single timings on a CPU are noisy).

        ## 4. Close the data loop

        A pipeline of steps can send the data back to the host after every step (each step its
        own round trip), or leave it on the device and bring back only the final result. `%%gpu`
        leaves results on the device unless you ask for `--to-host`, and a later cell that reads
        a device array moves nothing.
        '''),
        code('''
        STEP = "x = np.sqrt(x * x + 1.0)"
        STEPS = 10
        x0 = np.random.default_rng(3).random(2**26 if ON_GPU else 2**22, dtype=np.float32)
        cupy_magic.run_cell(STEP, {"np": np, "x": x0.copy()}, syncs="off")   # compile once

        round_trip = {"np": np, "x": x0.copy()}
        t0 = time.perf_counter()
        for _ in range(STEPS):       # upload, compute, download: every step
            cupy_magic.run_cell(STEP, round_trip, to_host=True, syncs="off")
        t_round_trip = time.perf_counter() - t0

        closed = {"np": np, "x": x0.copy()}
        t0 = time.perf_counter()
        for _ in range(STEPS):       # upload once (first step); x then stays on the device
            cupy_magic.run_cell(STEP, closed, syncs="off")
        cupy_magic.run_cell("result = x", closed, to_host=True, syncs="off")   # one download
        t_closed = time.perf_counter() - t0

        assert np.allclose(round_trip["x"], closed["result"])
        print(f"{STEPS} steps on {x0.nbytes / 2**20:.0f} MiB: round trip every step {t_round_trip * 1e3:.1f} ms, "
              f"closed loop {t_closed * 1e3:.1f} ms ({t_round_trip / t_closed:.1f}x)")
        '''),
        md('''
        On a GPU the closed loop is several times faster: the arithmetic is the same, only the
        crossings differ. On the CPU fallback there is no bridge to cross: both loops copy
        within host RAM and take about the same time.

        ## Exercises

        **Exercise 1: a dense kernel.** A matrix product `c = a @ b` of two n x n matrices moves
        3n² numbers but does 2n³ operations: its compute density grows with n. Measure the
        speed-up of the device (with transfers) over the host for a few sizes of n. Where is the
        break-even?
        '''),
        exercise('''
        # your code here: use best_run(..., backend="host") and best_run(..., backend=DEVICE,
        # to_host=True, key="wall_seconds") with {"np": np, "a": a, "b": b}
        '''),
        solution('''
        NS = [64, 256, 1024, 4096] if ON_GPU else [64, 256, 512]
        for n in NS:
            rng = np.random.default_rng(n)
            a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
            # warm on both sides: a first product pays one-off costs on the CPU too
            host = best_run("c = a @ b", {"np": np, "a": a, "b": b}, backend="host")
            dev = best_run("c = a @ b", {"np": np, "a": a, "b": b}, repeat=3, backend=DEVICE,
                           to_host=True, key="wall_seconds")
            print(f"n = {n:5d}: host {host.gpu_seconds * 1e3:9.2f} ms, device with transfers "
                  f"{dev.wall_seconds * 1e3:8.2f} ms, speed-up {host.gpu_seconds / dev.wall_seconds:6.2f}")
        _ = cupy_magic.use_backend(DEVICE)
        '''),
        md('''
        **Exercise 2: the way back.** The report times the upload only. Measure the download:
        run `y = x.copy()` with and without `to_host=True` and turn the difference into GB/s.
        Compare it with the upload: what is different about the host memory at each end?
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        keep = best_run("y = x.copy()", {"np": np, "x": x}, key="wall_seconds")
        back = best_run("y = x.copy()", {"np": np, "x": x}, key="wall_seconds", to_host=True)
        down = back.wall_seconds - keep.wall_seconds
        if down > 0 and ON_GPU:
            print(f"download: {x.nbytes / 2**20:.0f} MiB in {down * 1e3:.1f} ms = {x.nbytes / down / 1e9:.1f} GB/s "
                  f"(upload was {keep.inputs[0].gbps:.1f} GB/s)")
            # The upload reads x, which is pinned; the download writes a new NumPy array, whose
            # pages the operating system maps one by one as the copy first touches them.
            ns = {"np": np, "x": x}
            cupy_magic.run_cell("y = x.copy()", ns, syncs="off")     # ns["y"]: on the device
            touched = np.ones_like(x)                                # every page mapped already
            for label, get in [("into new host memory", lambda: ns["y"].get()),
                               ("into touched host memory", lambda: ns["y"].get(out=touched))]:
                t0 = time.perf_counter()
                get()
                t = time.perf_counter() - t0
                print(f"  .get() {label:25} {t * 1e3:7.1f} ms = {x.nbytes / t / 1e9:5.1f} GB/s")
            del ns, touched
        else:
            print("no download to measure: on the CPU fallback the result already lives in host RAM")
        '''),
        md('''
        ## What you learned

        - The PCIe bridge is much narrower than the GPU's own memory: the printed ratio in
          section 1 says by how much on this machine.
        - For light work on small arrays the GPU loses: fixed costs and transfers outweigh the
          arithmetic. The table in section 2 shows where the break-even lies here.
        - The more work per byte moved (compute density), the more the GPU wins (section 3).
        - Keep the data on the device between steps and bring back only the result (section 4):
          `%%gpu` leaves results on the device unless you write `--to-host`.
        '''),
    ])


# ---------------------------------------------------------------------------------------
# 02 VRAM budget
# ---------------------------------------------------------------------------------------

def nb02():
    return notebook([
        md('''
        # 02 The VRAM budget: estimate, choose the precision, read the errors

        GPU memory (VRAM) is much smaller and dearer than host RAM, and running out of it is the
        first obstacle after porting NumPy code. This notebook shows how to estimate what an
        array takes before you create it, what float32 buys you over float64 (memory, speed, and
        why the answer depends on the kind of GPU), and how to read the errors when a cell does
        not fit its budget.

        On a machine without a GPU the cells run on NumPy (the CPU fallback), with smaller
        sizes, and the "budget" is host memory that the extension accounts for.
        '''),
        code(LOAD),
        code(SETUP),
        SETUP_NOTE,
        md('''
        ## 1. Estimate before you allocate

        The guide's formula: **memory (GiB) = number of elements x bytes per element / 1024³**.
        A 20000 x 20000 matrix of float32 (4 bytes per element):
        '''),
        code("%vram_budget --estimate 20000x20000 float32"),
        code('''
        print(20000 * 20000 * 4 / 1024**3, "GiB by hand")
        est64 = cupy_magic.estimate("20000x20000", "float64")
        print(est64)
        print(f"this device has {info.total_bytes / 2**30:.1f} GiB: room for "
              f"{info.total_bytes // est64.nbytes} such float64 matrices, before any temporaries")
        '''),
        md('''
        `--estimate` also takes the name of an array you already have:
        '''),
        code('''
        N = 2**27 if ON_GPU else 2**22          # float64: 1 GiB on a GPU, 32 MiB on the CPU fallback
        x = np.random.default_rng(0).random(N)  # NumPy makes float64 unless told otherwise
        '''),
        code("%vram_budget --estimate x"),
        md('''
        ### Temporaries count too

        An expression such as `np.sqrt(x * x + 1)` makes a new array for every intermediate
        result. The report's *peak pool* is the most memory in use in the GPU's memory pool while
        the cell ran, arrays that earlier cells left on the device included. The cell's own
        share is the peak minus what was in use when the cell started
        (`report.start_pool_bytes`):
        '''),
        code('''
        %%gpu
        y = np.sqrt(x * x + 1)
        '''),
        code('''
        r = cupy_magic.last_report()
        peak = r.peak_pool_bytes - r.start_pool_bytes
        print(f"input {x.nbytes / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB: {peak / x.nbytes:.1f}x the input")
        '''),
        md('''
        So estimate the input, then multiply by the number of arrays alive at the worst moment
        of the cell. Here that is three. While `x * x + 1` is computed, `x`, `x * x` and the new
        sum are alive. Then `x * x` is freed, and the square root is written while `x` and the
        sum are alive: three again. Three arrays the size of the input: the ratio printed above.

        ## 2. float64 or float32?

        NumPy uses float64 by default. float32 halves every array: half the VRAM, half the bytes
        over PCIe. `--dtype float32` converts float64 inputs on the way in:
        '''),
        code('''
        %%gpu --dtype float32
        y32 = np.sqrt(x * x + 1)
        '''),
        code('''
        r32 = cupy_magic.last_report()
        peak32 = r32.peak_pool_bytes - r32.start_pool_bytes
        print(f"peak float64 {peak / 2**20:.0f} MiB, float32 {peak32 / 2**20:.0f} MiB "
              f"(ratio {peak / peak32:.2f}); saved on the way in: {r32.saved_bytes / 2**20:.0f} MiB")
        '''),
        md('''
        What float32 halves is the bytes held and moved. The `in` line's time, though, includes
        the conversion: NumPy first writes a float32 copy of `x` into new host memory, then that
        copy crosses the bus. So its GB/s is lower than a plain upload of the same array; cast
        once and keep the float32 copy (`x32 = x.astype(np.float32)`) when a notebook uploads it
        again and again.
        '''),
        md('''
        ### Speed depends on the hardware

        Two kinds of work behave differently:

        - **Memory-bound** work, such as `v * 2 + 1`, reads and writes each element once. If the
          memory's bandwidth sets its time, float32 takes half the time of float64: half the
          bytes. Whether it does is a question to measure, below.
        - **Compute-bound** work, such as a matrix product, follows the arithmetic units. Here
          the kind of GPU matters. Data-centre GPUs such as the H100 and H200 are built with
          strong FP64: by NVIDIA's specifications their FP64 rate is half their FP32 rate, and
          for matrix products their FP64 tensor cores (units built for matrix products) reach
          the FP32 rate. Consumer GeForce GPUs have few FP64 units: on recent ones the FP64 rate
          is 1/64 of the FP32 rate. On those, float32 is the difference between a fast and a
          crawling matrix product.

        Measure what *this* machine does. The arrays are made on the device, so no transfer is
        timed:
        '''),
        code('''
        N_VEC = 2**28 if ON_GPU else 2**22
        N_MAT = 8192 if ON_GPU else 512
        '''),
        code('''
        %%gpu --quiet
        rng = np.random.default_rng(0)
        v64 = rng.random(N_VEC)
        v32 = v64.astype(np.float32)
        m64 = rng.random((N_MAT, N_MAT))
        m32 = m64.astype(np.float32)
        '''),
        code('''
        rows = []
        for label, c64, c32, work in [
            (f"v * 2 + 1, {N_VEC:,} elements", "w = v64 * 2.0 + 1.0", "w = v32 * 2.0 + 1.0", None),
            (f"m @ m, {N_MAT} x {N_MAT}", "p = m64 @ m64", "p = m32 @ m32", 2 * N_MAT**3),
        ]:
            t64 = best_run(c64, repeat=5).gpu_seconds
            t32 = best_run(c32, repeat=5).gpu_seconds
            rows.append((label, t64, t32, work))
        for label, t64, t32, work in rows:
            if work:   # a matrix product: 2 n^3 operations
                rate = f"{work / t64 / 1e12:.2f} vs {work / t32 / 1e12:.2f} TFLOP/s"
            else:      # v * 2 + 1 is two kernels, each reading and writing every element
                rate = (f"{4 * v64.nbytes / t64 / 1e9:,.0f} vs {4 * v32.nbytes / t32 / 1e9:,.0f} GB/s, "
                        f"{2 * N_VEC / t64 / 1e9:.3g} vs {2 * N_VEC / t32 / 1e9:.3g} G elements/s")
            print(f"{label:30} float64 {t64 * 1e3:8.3f} ms  float32 {t32 * 1e3:8.3f} ms  "
                  f"float32 {'faster' if t32 < t64 else 'slower'} by {max(t64, t32) / min(t64, t32):.2f}x  ({rate})")
        print(f"measured on {info.name}, {time.strftime('%Y-%m-%d')}")
        '''),
        md('''
        For comparison, the plain copy of the same vectors within device memory: on a GPU a
        `cudaMemcpy`, which does no arithmetic at all and shows what the memory itself can do;
        on the CPU fallback a NumPy copy.
        '''),
        code('''
        if ON_GPU:
            import cupy as cp
            from cupyx.profiler import benchmark

            def plain_copy_seconds(v):
                dst = cp.empty_like(v)
                run = benchmark(cp.cuda.runtime.memcpy, (dst.data.ptr, v.data.ptr, v.nbytes,
                                cp.cuda.runtime.memcpyDeviceToDevice), n_repeat=10)
                return float(np.median(run.gpu_times))
        else:
            def plain_copy_seconds(v):
                dst = np.empty_like(v)
                return min(timed(lambda: np.copyto(dst, v)) for _ in range(5))

            def timed(fn):
                t0 = time.perf_counter()
                fn()
                return time.perf_counter() - t0
        for v in (v64, v32):
            t = plain_copy_seconds(v)
            print(f"plain copy, {str(v.dtype):8} {t * 1e3:8.3f} ms  {2 * v.nbytes / t / 1e9:8,.0f} GB/s  "
                  f"{N_VEC / t / 1e9:6.3g} G elements/s")
        del v
        '''),
        md('''
        Read the lines against the hardware:

        - **The memory-bound line.** Compare its rates. If float32 reached about the same GB/s
          as float64, and so twice the elements per second, bandwidth set the time and float32
          halved it. If instead both precisions processed about the same number of elements per
          second (float32 at half the GB/s), the kernel's work per element (its index
          arithmetic, one element per GPU thread) set the time, not the bytes: float32 then
          saves memory and transfers but no kernel time. The plain copy tells the two apart:
          it moves bytes with no per-element work, so when it reaches far more GB/s than the
          element-wise kernel, the memory was not the limit. On the H200 this notebook was run
          on, CuPy's element-wise kernels processed about the same number of elements per second
          in every precision (`benchmarks/dtype_elementwise.py` measures float16 too).
        - **The matrix-product line** depends on the FP64 units: on a data-centre GPU the two
          precisions come out close (and float64, which uses the FP64 tensor cores, can even be
          the faster); on a consumer GPU float32 wins by a wide margin; on the CPU fallback it
          is what the CPU's vector units give.

        float32 has about 7 significant digits, float64 about 16. That is why physics codes that
        add tiny corrections to large values keep float64:
        '''),
        code('''
        %%gpu --to-host
        lost64 = (np.full(3, 1e8, dtype=np.float64) + 1) - 1e8
        lost32 = (np.full(3, 1e8, dtype=np.float32) + 1) - 1e8
        '''),
        code('''
        print("1e8 + 1 - 1e8 in float64:", lost64, "  in float32:", lost32)
        '''),
        md('''
        ## 3. A budget, and its errors

        `%vram_budget` sets a limit on the memory the cells may hold. First free what the
        sections above left on the device, and look at the status:
        '''),
        code('''
        del y, y32, v64, v32, m64, m32, rng
        for name in ("w", "p"):
            globals().pop(name, None)
        print(f"released {cupy_magic.free_cached() / 2**20:.0f} MiB of cached blocks")
        '''),
        code("%vram_budget"),
        code('''
        BUDGET = "1GB" if ON_GPU else "64MB"
        %vram_budget $BUDGET
        BUDGET_BYTES = cupy_magic.budget_status().budget_bytes
        '''),
        md('''
        A cell that asks for more than the budget stops. This one is meant to fail:
        '''),
        fails('''
        %%gpu
        huge = np.zeros(2 * BUDGET_BYTES // 8)   # float64: twice the budget
        '''),
        md('''
        How to read it: the last line of the traceback is a `BudgetExceeded` (a `MemoryError`).
        It names the line that took the cell over the budget and what it asked for (on a GPU,
        the allocation and what the memory pool already held; on the CPU fallback, the memory
        the cell reached), the budget, and what to try. The cell is a transaction: nothing it
        assigned reached your variables.
        '''),
        code('''
        print("huge" in globals())
        '''),
        md('''
        The inputs can fit while the temporaries do not. `xb` takes 40% of the budget; the cell
        holds the input, `xb * xb` and `xb * xb + 1` at the same time: 120%. The second cell
        below is meant to fail too, and the error names the line:
        '''),
        code('''
        xb = np.random.default_rng(1).random(int(0.4 * BUDGET_BYTES) // 8)
        %vram_budget --estimate xb
        '''),
        fails('''
        %%gpu
        yb = np.sqrt(xb * xb + 1)
        '''),
        md('''
        One fix is to stop making temporaries: operations with `out=` and `+=` write into an
        array that already exists. Now the cell holds two arrays at most:
        '''),
        code('''
        %%gpu
        yb = xb * xb          # one new array
        yb += 1               # in place
        np.sqrt(yb, out=yb);  # in place (the ; shows nothing, so Out keeps no copy of yb)
        '''),
        md('''
        Arrays that earlier cells left on the device count against the budget too, as they do
        in the GPU's memory pool. `%vram_budget` (or `cupy_magic.budget_status()`, as below)
        shows them; `del` gives the memory back:
        '''),
        code('''
        print(cupy_magic.budget_status())
        del yb
        '''),
        md('''
        A budget larger than the device is refused at once (meant to fail):
        '''),
        fails("%vram_budget 100TB"),
        md('''
        ## 4. Who holds the memory: `%vram_who`

        `del y` gives memory back only when nothing else holds the array. A notebook holds
        values behind your back: `Out` keeps the last expression of every cell it showed (also
        as `_` and `_12`), and the last traceback keeps the local variables of the functions it
        went through. `%vram_who` lists every device array you can reach, largest first, with
        what holds it, and `%vram_who --free ...` drops a holder and says how many bytes the
        device got back.

        This cell ends with an expression, so the notebook shows it, and keeps it in `Out`:
        '''),
        code('''
        %%gpu
        scores = np.random.default_rng(3).random(int(0.3 * BUDGET_BYTES) // 8)   # 30% of the budget
        scores / scores.sum()      # the last expression: shown, and kept in Out
        '''),
        code('''
        del scores
        %vram_who
        '''),
        md('''
        `del scores` dropped the name, yet the list still has the normalised copy under `Out[n]`
        (and `_`): 30% of the budget that no variable of yours names. It counts against the
        budget like any array, so a cell that needs 80% of the budget no longer fits. This cell
        is meant to fail; read the end of its error, which names the largest holders and the
        command that frees each:
        '''),
        fails('''
        %%gpu
        work = np.zeros(int(0.8 * BUDGET_BYTES) // 8)
        '''),
        code("%vram_who --free Out"),
        md('''
        The line above says what was dropped and the bytes the device got back (on the CPU
        fallback, the host memory of the arrays cells made), measured before and after. Your
        own names are never deleted unless you name them. Now the cell fits:
        '''),
        code('''
        %%gpu
        work = np.zeros(int(0.8 * BUDGET_BYTES) // 8)
        '''),
        code('''
        del work
        '''),
        md('''
        A traceback holds memory too. The first cell below makes an array on the device. In the
        second, `standardise` has a typo (`sdt` for `std`), so it fails (meant to), and the
        traceback keeps the frame of `standardise` with its local variable `table`, the whole
        array:
        '''),
        code('''
        %%gpu --quiet
        samples = np.random.default_rng(4).random((int(0.3 * BUDGET_BYTES) // 32, 4))   # 4 columns
        '''),
        fails('''
        def standardise(table):
            return (table - table.mean(axis=0)) / table.sdt(axis=0)

        standardise(samples)
        '''),
        code('''
        del samples          # the name is gone; the traceback's frame still holds the array
        %vram_who
        '''),
        code("%vram_who --free traceback"),
        md('''
        `%vram_who --free all-unnamed` drops both kinds at once (`Out` and the traceback); a name
        of yours, or several separated by commas, is freed only when you write it
        (`%vram_who --free a,b`). A line that ends with `;` shows nothing and keeps nothing in
        `Out`: end lines that make large arrays with it. `cupy_magic.vram_holders()` returns
        the records, for a script.

        ## Exercises

        **Exercise 1: how large can it be?** With the budget above, the cell
        `d = np.abs(p[:, None] - p[None, :])` builds an n x n float64 matrix of pairwise
        distances between n points, and one n x n temporary on the way. What is the largest n
        that fits? Count what earlier cells still hold, and note that the pool's cached blocks
        count against the budget too (`cupy_magic.free_cached()` releases them). Check your
        answer with `%vram_budget --estimate`, then run the line in a `%%gpu` cell, with
        `p = np.random.default_rng(2).random(n)`.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        cupy_magic.free_cached()                          # cached blocks count against the budget
        free = BUDGET_BYTES - cupy_magic.budget_status().pool_used   # what earlier cells hold counts
        n_max = int((free / (2 * 8)) ** 0.5)              # two n x n float64 arrays
        n = int(0.9 * n_max)                              # leave room for p and rounding
        print(f"{free / 2**20:.0f} MiB of the budget free; n_max = {n_max:,}; trying n = {n:,}:",
              cupy_magic.estimate(f"{n}x{n}", "float64"))
        p = np.random.default_rng(2).random(n)
        get_ipython().run_cell_magic("gpu", "--quiet", "d = np.abs(p[:, None] - p[None, :])")
        r = cupy_magic.last_report()
        print(f"peak {r.peak_pool_bytes / 2**20:.0f} MiB of a {BUDGET_BYTES / 2**20:.0f} MiB budget")
        del d
        '''),
        md('''
        **Exercise 2: one option.** Make the failing `yb = np.sqrt(xb * xb + 1)` cell fit the
        budget without changing its code.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        %%gpu --dtype float32
        yb = np.sqrt(xb * xb + 1)    # three float32 arrays: 3 x 20% of the budget
        '''),
        code('''
        del yb
        '''),
        md('''
        **Exercise 3: who still holds it?** The cells below keep a grid in a list and in a
        function, as a longer notebook does without noticing, then `del grid`. Find what still
        holds the grid's memory and give it back, deleting no name of yours that does not hold
        it; check the bytes the device got back.
        '''),
        code('''
        %%gpu --quiet
        grid = np.zeros(int(0.2 * BUDGET_BYTES) // 8)
        '''),
        code('''
        snapshots = [grid]           # e.g. a snapshot per step, kept for a plot

        def make_scaler(g):
            def scale(k):
                return g * k         # scale keeps g alive: g is in its closure
            return scale

        scaled = make_scaler(grid)
        del grid
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        print(cupy_magic.vram_holders())         # snapshots[0] and scaled.__closure__ (g)
        cupy_magic.vram_free("snapshots,scaled")  # %vram_who --free snapshots,scaled
        '''),
        code('''
        for name in ("snapshots", "scaled"):     # if the exercise left them
            globals().pop(name, None)
        cupy_magic.free_cached()
        %vram_budget off
        '''),
        md('''
        ## What you learned

        - Memory = elements x bytes per element / 1024³ (`%vram_budget --estimate`), and a cell
          needs that for every array alive at once, temporaries included (the peak pool).
        - float32 halves memory and transfers (`--dtype float32`). Whether it also speeds up the
          work depends on what limits it: an element-wise kernel bound by elements per second
          gains nothing, and matrix products depend on the GPU (data-centre GPUs are built with
          strong FP64, consumer GPUs are not). The table in section 2 shows what this machine does.
        - float32 keeps about 7 digits: keep float64 where the problem needs it.
        - A cell over budget stops with a `BudgetExceeded` that says what was asked, the budget,
          and what to try; your variables stay as they were. In-place operations (`out=`, `+=`)
          lower the peak.
        - `del` frees an array only when nothing else holds it: `Out`, the last traceback, a
          list or a closure can. `%vram_who` lists the holders, largest first;
          `%vram_who --free Out`, `--free traceback` or `--free NAME` drops one and prints the
          bytes the device got back. End lines that make large arrays with `;`.
        '''),
    ])


# ---------------------------------------------------------------------------------------
# 03 batching and streams
# ---------------------------------------------------------------------------------------

def nb03():
    return notebook([
        md('''
        # 03 Batching and streams: data larger than VRAM

        When the data does not fit the GPU's memory (the guide's example: 50 GB of data, a
        24 GB card), you cannot send it in one piece. You cut it into **batches** along the
        first axis, send one batch, compute, bring the result back, and move on to the next.
        This notebook puts the guide's hand-written loop next to `%%gpu` auto-batching, which
        does the same thing for you through **CUDA streams**, so that the upload of one batch
        overlaps the computation of another. (A stream is a queue of GPU work that runs in
        order; work in different streams may run at the same time.) You will measure the
        throughput of each approach, the difference between pinned and pageable host memory,
        and how much of the work the streams overlap; and you will see what happens when one
        batch fails.

        On a machine without a GPU, `%%gpu` cells run on NumPy (the *CPU fallback*): the same
        planner cuts the same batches, but they run one after the other, so nothing overlaps and
        nothing is pinned. Sizes scale down there.
        '''),
        code(LOAD),
        code(SETUP),
        SETUP_NOTE,
        code('''
        from cupy_magic.run.batching import PROMISE, BatchOptions

        N = 2**30 if ON_GPU else 2**24        # float32: 4 GiB on a GPU, 64 MiB on the CPU fallback
        BATCH_SIZE = 2**25 if ON_GPU else 2**20   # rows per batch in the hand-written loop (128 MiB / 4 MiB)
        BUDGET = "1GiB" if ON_GPU else "16MiB"    # a VRAM budget a quarter of the input
        x = np.random.default_rng(0).random(N, dtype=np.float32)
        print(f"x: {x.nbytes / 2**30:.2f} GiB of float32 in host RAM, {N:,} rows")

        # The work done on every row: several element-wise operations, so there is compute to overlap.
        KERNEL = "y = np.sqrt(np.abs(np.sin(x) * np.cos(x))) * 2.0 + np.exp(-x * x)"
        '''),
        md('''
        ## 1. The guide's loop

        Section 3A of the guide: never push the whole data set at once; loop over slices, and
        drop the references at the end of each batch so the memory pool can reuse the blocks.
        On a GPU the loop below runs exactly as the guide writes it, with CuPy (`cp.array`
        uploads a batch, `.get()` brings the result back). On the CPU fallback the same loop
        runs with the NumPy equivalents (a copy of the slice, and the result is already on the
        host).
        '''),
        code('''
        if ON_GPU:
            import cupy as cp
        xp = cp if ON_GPU else np


        def complex_kernel(x):
            """KERNEL as a function: the same operations, on CuPy (GPU) or NumPy (CPU fallback)."""
            return xp.sqrt(xp.abs(xp.sin(x) * xp.cos(x))) * 2.0 + xp.exp(-x * x)


        def guide_loop(data_cpu, batch_size):
            results_cpu = []
            if ON_GPU:
                for i in range(0, len(data_cpu), batch_size):
                    batch_gpu = cp.array(data_cpu[i:i + batch_size])   # upload this batch only
                    res_gpu = complex_kernel(batch_gpu)                 # dense GPU compute
                    results_cpu.append(res_gpu.get())                   # back to the CPU
                    del batch_gpu, res_gpu                              # let the pool reuse memory
            else:   # the CPU fallback: the same loop with the NumPy equivalents
                for i in range(0, len(data_cpu), batch_size):
                    batch = np.array(data_cpu[i:i + batch_size])        # copy this batch
                    res = complex_kernel(batch)
                    results_cpu.append(res)                             # already on the host
                    del batch, res
            return results_cpu


        guide_loop(x[:BATCH_SIZE], BATCH_SIZE)      # warm-up: compile the kernels once
        t0 = time.perf_counter()
        results_cpu = guide_loop(x, BATCH_SIZE)
        t_guide = time.perf_counter() - t0
        cupy_magic.free_cached()                    # give the loop's cached blocks back to the device
        print(f"guide loop: {len(results_cpu)} batches of {BATCH_SIZE:,} rows in {t_guide:.3f} s "
              f"= {x.nbytes / t_guide / 1e9:.2f} GB/s of input, results on the host")
        '''),
        md('''
        Each step of the loop waits for the one before: `cp.array` copies from ordinary
        (pageable) host memory and returns when the copy is done, the kernels run, and `.get()`
        waits for them before it copies the result back. While the bus is busy the GPU's
        arithmetic units wait, and the other way round. That is the guide's section 3B: *by
        default transfer and compute run one after the other*.

        ## 2. `%%gpu` batches for you

        Set a VRAM budget smaller than the input. A `%%gpu` cell whose NumPy inputs need more
        than the budget leaves is batched automatically: same cell, no loop to write.
        '''),
        code('''
        %vram_budget $BUDGET
        '''),
        code('''
        %%gpu
        y = np.sqrt(np.abs(np.sin(x) * np.cos(x))) * 2.0 + np.exp(-x * x)
        '''),
        code('''
        first_touch = cupy_magic.last_report()
        plan = first_touch.batch
        print(plan)
        print()
        print("y is", type(y).__module__, y.dtype, y.shape, "- the rows were gathered on the host")
        ref = np.concatenate(results_cpu)
        print(f"largest difference from the guide loop's result: {float(np.abs(y - ref).max()):.2e}")
        del results_cpu, ref
        '''),
        md('''
        The report's `batch` lines are the plan the cell followed (`cupy_magic.last_report().batch`
        is the `BatchPlan` object):

        - **why** it was batched: the inputs need more than the budget leaves;
        - **the promise it relies on**: each row's results depend only on that row. `np.sin(x)`
          keeps it; `x - x.mean()` breaks it, because each batch would subtract its own mean.
          The planner reads the cell's code for it before anything moves: a cell batched on its
          own stops at a line that mixes rows, or that it cannot see into, and says which
          (exercise 2); `--batch` runs a cell the check cannot see into, on your promise;
        - **the plan**: a small first batch measures how many bytes per row the cell takes in
          the pool (input, temporaries, result), then the other batches are sized so that the
          batches in flight on the streams fit the budget;
        - **the results**: `y` has one row per input row, so its rows are gathered into one
          host array.

        On a GPU each batch goes to one of several CUDA streams (`--streams K`, 3 by default):
        while one stream computes, another uploads its batch and a third downloads its result.
        '''),
        code('''
        print("the promise:", PROMISE)
        print(f"{plan.batches} batches: first {plan.first_rows:,} rows, then {plan.rows:,} rows each, "
              f"on {plan.streams} streams; sized by {plan.sized_by}")
        '''),
        md('''
        ### A total needs a rule

        A result with one row per input row is gathered. A result without a row axis, such as a
        sum, has one value per batch, and the cell must say how to join them: `--reduce
        total=sum` (or `min`, `max`, `mean`, `any`, `all`, `concat`). Without a rule the cell
        stops and names the rule to add. `mean` weights each batch by its rows, so the mean of
        the batches equals the mean of the whole.
        '''),
        md('''
        The first call of each reduction compiles its GPU kernel (notebook 04 shows warm-up in
        detail); in a batched cell that would happen in the first batch, inside the timed run.
        `--warmup` runs the cell once, unbatched, on the first rows of `x`, and joins its
        results with the rules once, so that the timed run compiles nothing:
        '''),
        code('''
        %%gpu --warmup --reduce total=sum,top=max,avg=mean
        y = np.sqrt(np.abs(np.sin(x) * np.cos(x))) * 2.0 + np.exp(-x * x)
        total = y.sum(dtype=np.float64)
        top = y.max()
        avg = y.mean(dtype=np.float64)
        '''),
        code('''
        print(f"batched: sum {float(total):.6e}, max {float(top):.6f}, mean {float(avg):.6f}")
        print(f"NumPy:   sum {y.sum(dtype=np.float64):.6e}, max {y.max():.6f}, mean {y.mean(dtype=np.float64):.6f}")
        del total, top, avg
        '''),
        md('''
        ## 3. Throughput: loop, whole array, batched

        Every approach below reads the same input, computes the same kernel, and ends with the
        result in host memory. The figure is **input bytes per second of the whole job**
        (uploads, compute and downloads). The report's `in` line of a batched cell measures the
        same kind of rate: its time covers the whole streamed run, because uploads, compute and
        downloads overlap and cannot be told apart.

        The first batched cell above was the first time `%%gpu` touched `x`: on a GPU its
        batches went through pinned staging buffers filled by several host threads, and after
        the run the extension page-locked (pinned) `x`'s host memory on a helper thread, in one
        piece. `x` stays pinned while it lives, so a second cell over the same array copies
        straight from it.

        The result `y` is new host memory the first time: its rows arrive through staging, and
        the extension pins it after the run. When you drop `y` (`del y`), its pinned block is
        kept, and the next batched result of about the same size lands in it directly, with no
        staging. Drop `y` and run the same cell once more:
        '''),
        code("del y   # its pinned block goes back to the extension's cache"),
        code('''
        %%gpu
        y = np.sqrt(np.abs(np.sin(x) * np.cos(x))) * 2.0 + np.exp(-x * x)
        '''),
        code('''
        second = cupy_magic.last_report()
        for label, r in [("first touch", first_touch), ("second cell", second)]:
            m = r.inputs[0]
            print(f"{label:12} {'pinned' if m.pinned else 'pageable':>9}, "
                  f"{r.batch.staged_batches:3d} of {r.batch.batches} batches staged, "
                  f"{x.nbytes / r.wall_seconds / 1e9:7.2f} GB/s")
        '''),
        md('''
        For comparison, the whole array in one piece. That needs the budget off (on a GPU with
        room for the input and its temporaries); the best of a few runs is kept.
        '''),
        code('''
        %vram_budget off
        whole = best_run(KERNEL, {"np": np, "x": x}, repeat=2, to_host=True, key="wall_seconds")
        print(f"whole array: {'pinned' if whole.inputs[0].pinned else 'pageable'} upload, "
              f"{x.nbytes / whole.wall_seconds / 1e9:.2f} GB/s end to end")
        del y
        print(f"released {cupy_magic.free_cached() / 2**30:.2f} GiB of cached blocks "
              "(they would count against the budget set next)")
        '''),
        code('''
        %vram_budget $BUDGET
        '''),
        code('''
        bars = {
            "guide loop\\n(cp.array / .get())": x.nbytes / t_guide / 1e9,
            "whole array\\n(one %%gpu cell)": x.nbytes / whole.wall_seconds / 1e9,
            "%%gpu batched\\nfirst touch": x.nbytes / first_touch.wall_seconds / 1e9,
            "%%gpu batched\\nsecond cell": x.nbytes / second.wall_seconds / 1e9,
        }
        for label, gbps in bars.items():
            print(f"{label.replace(chr(10), ' '):40} {gbps:7.2f} GB/s  ({gbps / bars[next(iter(bars))]:.2f}x the guide loop)")
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        ax.bar(list(bars), list(bars.values()), color=["#999", "#69c", "#e93", "#c60"])
        ax.set_ylabel("input GB/s, whole job (higher is better)")
        ax.set_title(f"{x.nbytes / 2**20:,.0f} MiB of float32 on {info.name}, {time.strftime('%Y-%m-%d')}")
        for i, v in enumerate(bars.values()):
            ax.text(i, v, f"{v:.2f}", ha="center", va="bottom")
        plt.tight_layout()
        plt.show()
        '''),
        md('''
        How to read the chart on a GPU: the guide loop pays for every transfer from pageable
        memory and waits between steps. The whole-array cell needs VRAM for the whole input and
        its temporaries, which is exactly what you do not have when the data is larger than the
        card. And nothing in it overlaps: the upload, then the kernels, then one download of the
        whole result into new host memory, whose pages the operating system maps as the copy
        writes them (notebook 01, exercise 2, measures how much that costs).

        The batched cells stream the data within the budget; the second one starts with `x`
        already pinned and its result lands in the pinned block the first one left. On the CPU
        fallback every bar is NumPy in host RAM, and the differences are the extra copies each
        approach makes.

        ## 4. Pinned and pageable memory

        The GPU copies over PCIe only from page-locked (*pinned*) host memory. From ordinary
        *pageable* memory a copy first goes through a pinned staging buffer. `%%gpu` pins large
        NumPy-owned inputs itself; memory owned by another object (here a `bytearray`, as in a
        file read into a buffer) is left pageable, and its batches are staged every time. The
        report says which one each input was (`report.inputs[i].pinned`).
        '''),
        code('''
        x_pageable = np.frombuffer(bytearray(x.nbytes), dtype=np.float32)
        x_pageable[:] = x
        same_plan = BatchOptions(rows=plan.rows)
        pin = {}
        for label, arr in [("NumPy-owned (x)", x), ("bytearray-owned", x_pageable)]:
            r = best_run(KERNEL, {"np": np, "x": arr}, repeat=2, key="wall_seconds", batch=same_plan)
            pin[label] = (r.inputs[0].pinned, x.nbytes / r.wall_seconds / 1e9, r.batch.staged_batches)
            print(f"{label:18} {'pinned' if r.inputs[0].pinned else 'pageable':>9}: {pin[label][1]:7.2f} GB/s, "
                  f"{r.batch.staged_batches} of {r.batch.batches} batches staged")
        (_, fast, _), (_, slow, _) = pin.values()
        print(f"pinned / pageable: {fast / slow:.2f}x on {info.name}")
        del x_pageable
        '''),
        md('''
        On a GPU the pinned input streams faster, and the ratio printed above is what pinning
        is worth for this cell on this machine. On the CPU fallback nothing is pinned and the
        two runs do the same work, so the ratio stays near 1.

        ## 5. Do the streams overlap?

        First the parts on their own, with the same batches (`--batch-rows` set to the plan's
        size):

        - **transfer only**: the batched cell `y = x` (upload each batch, download it again);
        - **compute only**: the kernel on one batch already on the device, times the number of
          batches;
        - **streamed, 1 stream** (`--streams 1`) and **streamed, 3 streams** (the default): the
          real batched cell.

        Without overlap the streamed time would be the sum of the first two.
        '''),
        code('''
        rows = plan.rows
        t_transfer = best_run("y = x", {"np": np, "x": x}, key="wall_seconds",
                              batch=BatchOptions(rows=rows)).wall_seconds

        %vram_budget off
        ns_dev = {"np": np, "x": x[:rows]}
        cupy_magic.run_cell("x = x.copy()", ns_dev, syncs="off")   # ns_dev["x"]: one batch, on the device
        t_compute = best_run(KERNEL, ns_dev, repeat=5).gpu_seconds * N / rows
        del ns_dev
        %vram_budget $BUDGET

        t_stream = {k: best_run(KERNEL, {"np": np, "x": x}, key="wall_seconds",
                                batch=BatchOptions(rows=rows, streams=k)).wall_seconds
                    for k in (1, 3)}
        print(f"transfer only {t_transfer:.3f} s, compute only {t_compute:.3f} s, "
              f"sum {t_transfer + t_compute:.3f} s")
        print(f"streamed: 1 stream {t_stream[1]:.3f} s, 3 streams {t_stream[3]:.3f} s")
        hidden = (t_transfer + t_compute - t_stream[3]) / min(t_transfer, t_compute)
        print(f"3 streams hid {min(max(hidden, 0), 1):.0%} of the shorter part "
              f"({'compute' if t_compute < t_transfer else 'transfer'})")
        '''),
        code('''
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        labels = ["transfer\\nonly", "compute\\nonly", "sum\\n(no overlap)", "streamed\\n1 stream", "streamed\\n3 streams"]
        ax.bar(labels[0], t_transfer, color="#69c")
        ax.bar(labels[1], t_compute, color="#e93")
        ax.bar(labels[2], t_transfer, color="#69c")
        ax.bar(labels[2], t_compute, bottom=t_transfer, color="#e93")
        ax.bar(labels[3], t_stream[1], color="#999")
        ax.bar(labels[4], t_stream[3], color="#c60")
        ax.axhline(t_transfer + t_compute, color="grey", linestyle="--", linewidth=1)
        ax.set_ylabel("seconds for the whole input (lower is better)")
        ax.set_title(f"{plan.batches} batches of {rows:,} rows on {info.name}, {time.strftime('%Y-%m-%d')}")
        plt.tight_layout()
        plt.show()
        '''),
        md('''
        On a GPU, a streamed bar below the dashed line (the sum) is overlap: the copies of one
        batch ran while another batch computed. The printed line says how much of the shorter
        part was hidden (at most all of it). With one stream each batch waits for the one
        before, as in the guide's loop, so copies and compute do not overlap, and the bar can
        stand at or above the dashed line: each batch also pays its own launch and wait.

        On the CPU fallback the batches run one after the other and nothing overlaps. The
        "compute only" bar there is one batch's time times the number of batches, which a CPU
        does not reproduce exactly, so the streamed bars can land on either side of the sum:
        read nothing into the printed share there.

        ### The timeline

        With `--timeline` (`BatchOptions(timeline=True)`) a batched run also records when each
        batch started and ended (`report.batch.timeline`: one `(stream, start, end)` per batch;
        on a GPU read from CUDA timing events on the streams, so it is device time). Drawn as
        one lane per stream, overlap shows as bars of different lanes side by side in time;
        `report.batch.overlap` is the number of batches in flight on average.

        Measuring can cost something. The GPU writes a timing event's time only once the work
        queued ahead of it is done, which can make the streams overlap less while a timeline is
        recorded; that is why it is off by default. The cell below measures what it costs on
        this machine (on the CPU fallback there are no events, and any difference is noise).
        '''),
        code('''
        streamed = {k: best_run(KERNEL, {"np": np, "x": x}, key="wall_seconds",
                                batch=BatchOptions(rows=rows, streams=k, timeline=True))
                    for k in (1, 3)}
        for k in (1, 3):
            print(f"{k} stream(s): {x.nbytes / t_stream[k] / 1e9:6.2f} GB/s, "
                  f"{x.nbytes / streamed[k].wall_seconds / 1e9:6.2f} GB/s with --timeline "
                  f"({streamed[k].wall_seconds / t_stream[k] - 1:+.0%} time)")
        '''),
        code('''
        fig, axes = plt.subplots(2, 1, figsize=(8, 3.8), sharex=True)
        for ax, k in zip(axes, (1, 3)):
            line = streamed[k].batch.timeline
            for lane, start, end in line:
                ax.barh(lane, end - start, left=start, height=0.6, edgecolor="white", linewidth=0.3,
                        color=["#69c", "#e93", "#c60"][lane % 3])
            ax.set_yticks(range(k), [f"stream {j}" for j in range(k)])
            ax.set_title(f"{k} stream(s): {len(line)} batches, "
                         f"{streamed[k].batch.overlap:.1f} in flight on average", fontsize=10)
        axes[-1].set_xlabel("seconds since the first batch started")
        fig.suptitle(f"batch timeline on {info.name}, {time.strftime('%Y-%m-%d')}", fontsize=11)
        plt.tight_layout()
        plt.show()
        for k in (1, 3):
            print(f"{k} stream(s): {streamed[k].batch.overlap:.2f} batches in flight on average")
        '''),
        md('''
        With one stream the bars follow one another: one batch at a time. With three, on a GPU,
        the lanes overlap: while one batch computes, the next uploads and the one before
        downloads; the printed averages say how much. On the CPU fallback the batches run one
        after another whatever the number of streams (about 1.0 in flight).

        ## 6. When a batch fails

        A batched cell is still a transaction: if any batch raises, the streams are drained,
        the buffers released, and **no** name the cell assigns is written back. The message
        names the batch and its rows. Here the data has a bad value three quarters of the way
        in, and the cell checks for it.

        The check decides on a value over all the rows it sees, so the planner cannot tell
        whether batches give the same answer as the whole array, and it would refuse to batch
        the cell on its own. Here they do: the whole input has a NaN exactly when one of its
        batches does. `--batch` runs the cell in batches on that promise. The second cell
        below is meant to fail:
        '''),
        code('''
        x_bad = x.copy()
        x_bad[3 * N // 4] = np.nan
        y_clean = None
        '''),
        fails('''
        %%gpu --batch --syncs off
        if np.isnan(x_bad).any():
            raise ValueError("NaN in the input")
        y_clean = np.sqrt(x_bad)
        '''),
        code('''
        print("y_clean after the failed cell:", y_clean, "- nothing was committed")
        del x_bad, y_clean
        '''),
        md('''
        The note under the error says which batch failed (its number and its rows) and that
        nothing was committed: `y_clean` still holds the value it had before the cell, even
        though the earlier batches ran without error.

        ## Exercises

        **Exercise 1: how many streams?** Measure the batched cell (`KERNEL` over `x`, budget
        `BUDGET`) with 1, 2, 3 and 4 streams, and with batches half and twice the plan's size
        (`BatchOptions(rows=..., streams=...)`, or `%%gpu --streams K --batch-rows N`). Which
        is fastest on this machine?
        '''),
        exercise('''
        # your code here: best_run(KERNEL, {"np": np, "x": x}, key="wall_seconds",
        #                          batch=BatchOptions(rows=..., streams=...))
        '''),
        solution('''
        cupy_magic.set_budget(None)   # twice the plan's batch size may not fit the budget
        print(f"{'rows':>12} {'streams':>8} {'GB/s':>8}")
        for r_rows in (plan.rows // 2, plan.rows, plan.rows * 2):
            for k in (1, 2, 3, 4):
                r = best_run(KERNEL, {"np": np, "x": x}, repeat=1, key="wall_seconds",
                             batch=BatchOptions(rows=r_rows, streams=k))
                print(f"{r_rows:12,} {k:8d} {x.nbytes / r.wall_seconds / 1e9:8.2f}")
        print(f"on {info.name}")
        cupy_magic.free_cached()      # blocks cached by the larger batches would count against it
        cupy_magic.set_budget(BUDGET)
        '''),
        md('''
        **Exercise 2: a cell that breaks the promise.** `z = x - x.mean()` subtracts the mean of
        the input. Run it under the budget: what does `%%gpu` say, and why would batches give
        another answer than NumPy on the whole array? Then get the right answer in two batched
        cells: the first computes the mean with a rule, the second uses it.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        ns = {"np": np, "x": x}
        try:                                    # batched, each batch would subtract its own mean
            cupy_magic.run_cell("z = x - x.mean()", ns, syncs="off")
        except cupy_magic.CellError as err:
            print("one cell: refused:", err)
        cupy_magic.run_cell("m = x.mean(dtype=np.float64)", ns, syncs="off",
                            batch=BatchOptions(reduce={"m": "mean"}))
        cupy_magic.run_cell("z = x - m", ns, syncs="off")                # m is shared by every batch
        print("two cells:         max error", float(np.abs(ns["z"] - (x - x.mean(dtype=np.float64))).max()))
        del ns
        '''),
        code('''
        %vram_budget off
        print(f"released {cupy_magic.free_cached() / 2**20:.0f} MiB of cached blocks")
        '''),
        md('''
        ## What you learned

        - Data larger than VRAM is cut into batches along the first axis; the guide's loop does
          it by hand, one step after the other.
        - `%%gpu` batches a cell by itself when its inputs exceed the `%vram_budget`, sizes the
          batches from a measured first batch, and says so in the report
          (`cupy_magic.last_report().batch`).
        - Batching relies on a promise: each row's results depend only on that row. Results
          without a row axis need a rule (`--reduce total=sum`); a cell that mixes rows (such
          as `x - x.mean()`) is refused before anything moves, naming the line: split it.
        - Pinned host memory streams faster than pageable memory; `%%gpu` pins large NumPy
          inputs on first touch, keeps them pinned while they live, and reuses the pinned block
          of a result you dropped (section 4 printed the ratio here).
        - CUDA streams overlap the transfers of one batch with the compute of another (section
          5 measured how much and drew the timeline); on the CPU fallback the batches run in
          order.
        - A failing batch commits nothing, and the error names the batch.
        '''),
    ])


# ---------------------------------------------------------------------------------------
# 04 sync pitfalls
# ---------------------------------------------------------------------------------------

def nb04():
    return notebook([
        md('''
        # 04 Host syncs: the pitfalls that kill performance, and warm-up

        The CPU does not wait for the GPU. When Python runs `y = np.sqrt(x)` on the device, it
        only *queues* the work and moves on to the next line; the GPU works through the queue on
        its own. That is what makes a GPU fast from Python.

        Some harmless-looking lines break this: whenever Python needs a *value* from the
        device (`if y.max() > 0:`, `print(y)`, `float(y)`, `x[x > 0]`), the CPU must wait until
        the queue has drained and the value has crossed the bridge. That is a **host sync**. In a
        loop it happens at every step. `%%gpu` finds these lines before the cell runs, and on a
        GPU counts the ones that really happened, line by line.

        On the CPU fallback nothing is queued, so there is nothing to wait for: the warnings are
        the same, but the timings show only the cost of the arithmetic.
        '''),
        code('''
        # Compiled GPU kernels are cached on disk. Point the cache to an empty folder, so that
        # section 6 sees a first call as a new user does (this must run before CuPy is imported).
        import os, sys, tempfile
        FRESH_KERNEL_CACHE = "cupy" not in sys.modules
        if FRESH_KERNEL_CACHE:
            os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy-kernels-")
        '''),
        code(LOAD),
        code(SETUP),
        SETUP_NOTE,
        code('''
        N = 2**25 if ON_GPU else 2**18   # float32: 128 MiB on a GPU, 1 MiB on the CPU fallback
        STEPS = 200
        x = np.random.default_rng(0).random(N, dtype=np.float32)
        '''),
        md('''
        ## 1. A decision on the host, in a loop

        The loop asks the device "is the maximum above 0.5?" at every step. The report names
        the line, says why it syncs and what to write instead; on a GPU it also says how many
        times it happened. (`--warmup` runs the cell once on a small slice first, so that the
        timed run neither compiles nor loads new kernels: section 6 says more.)
        '''),
        code('''
        %%gpu --warmup
        y = np.sqrt(x)
        for step in range(STEPS):
            if y.max() > 0.5:          # the host waits for the device here
                y = y * 0.999
        '''),
        md('''
        The fix keeps the decision on the device: `np.where` (CuPy's `where` inside `%%gpu`)
        picks the factor, 0.999 or 1, without asking the host, and the multiplication always
        runs. The two factors are float32, like `y`: with Python floats `np.where` would return
        a float64 value, and `y * value` would then be computed in float64. The report has no
        sync row:
        '''),
        code('''
        %%gpu --warmup
        y = np.sqrt(x)
        for step in range(STEPS):
            y = y * np.where(y.max() > 0.5, np.float32(0.999), np.float32(1.0))
        '''),
        code('''
        BAD = """
        y = np.sqrt(x)
        for step in range(STEPS):
            if y.max() > 0.5:
                y = y * 0.999
        """
        GOOD = """
        y = np.sqrt(x)
        for step in range(STEPS):
            y = y * np.where(y.max() > 0.5, np.float32(0.999), np.float32(1.0))
        """
        t_bad = best_run(BAD).gpu_seconds
        t_good = best_run(GOOD).gpu_seconds
        print(f"host decides: {t_bad * 1e3:.2f} ms; device decides: {t_good * 1e3:.2f} ms; "
              f"host-decides / device-decides = {t_bad / t_good:.2f} ({info.name})")
        '''),
        md('''
        Both versions do the same work on the device, plus one tiny `where` on a single value in
        the second. What differs is the waiting. At each sync the device finishes its queue
        and then sits idle while Python, told the answer, queues the next step; without syncs
        Python runs ahead and the queue never empties. So a ratio above 1 is the device's idle
        time at the syncs. It is largest when a step's device work takes about as long as
        Python takes to queue it; with much more work per step the idle gaps matter less, and
        with much less (tiny arrays) both versions wait for Python anyway. On the CPU fallback
        there is no queue and nothing waits: the ratio shows only the cost of the extra `where`
        call (below 1).

        ## 2. `print` in a loop

        Printing a device value copies it to the host. Keep per-step values on the device and
        print once, after the loop:
        '''),
        code('''
        %%gpu
        y = x.copy()
        for step in range(5):
            y = np.sqrt(y)
            print(step, y.mean())
        '''),
        code('''
        %%gpu
        y = x.copy()
        means = []
        for step in range(5):
            y = np.sqrt(y)
            means.append(y.mean())     # a 0-d device array: nothing is copied
        means = np.stack(means)
        print(means)                   # one sync, after the loop
        '''),
        md('''
        The report of the second cell still lists the final `print`, but once, not inside a loop.

        ## 3. `np.any` kept on the device

        `if np.any(y < 0):` turns a device answer into a Python `bool`: a sync. Keep the answer
        as a device array and let `np.where` pick the step from it (0.01 or 0, float32 like
        `y`), as in section 1:
        '''),
        code('''
        %%gpu --warmup
        y = x - 0.5
        for step in range(STEPS):
            if np.any(y < 0):
                y = y + 0.01
        '''),
        code('''
        %%gpu --warmup
        y = x - 0.5
        for step in range(STEPS):
            y = y + np.where(np.any(y < 0), np.float32(0.01), np.float32(0.0))
        '''),
        md('''
        Compare the two `run` lines with care. The loop with `if` stops adding once no value is
        negative: `y` starts at -0.5 and gains 0.01 a step, so after about 50 steps the
        condition is false and the other 150 steps add nothing. The `where` version adds at
        every step (0.01, then 0). The two cells do different work on the device, so their
        times do not measure the syncs alone (section 1 compares equal work); what the second
        one removes is the 200 waits that the first report counted.
        '''),
        md('''
        ## 4. Element by element: vectorise

        A Python loop over elements launches a tiny device operation for each one, and
        `float(x[i])` copies each element to the host. One array operation does it all:
        '''),
        code('''
        K = 1000
        LOOP = """
        total = 0.0
        for i in range(K):
            total += float(x[i])
        """
        VECTOR = "total = x[:K].sum()"
        t_loop = best_run(LOOP, repeat=1).gpu_seconds
        t_vec = best_run(VECTOR).gpu_seconds
        print(f"loop {t_loop * 1e3:.2f} ms, vectorised {t_vec * 1e3:.3f} ms: {t_loop / t_vec:.0f}x ({info.name})")
        '''),
        code('''
        %%gpu --quiet
        total = 0.0
        for i in range(K):
            total += float(x[i])
        '''),
        code('''
        for row in cupy_magic.last_report().syncs:
            print(row.describe())
        '''),
        md('''
        ## 5. Stop at the first sync: `--syncs error`

        While you port code, `--syncs error` turns the first host sync into an error that names
        the line (on the CPU fallback the static check stops the cell before it runs). This cell
        is meant to fail:
        '''),
        fails('''
        %%gpu --syncs error
        y = np.sqrt(x)
        for step in range(STEPS):
            if y.max() > 0.5:
                y = y * 0.999
        '''),
        md('''
        `%gpu_syncs error` makes it the default for every `%%gpu` cell of the session; the fixed
        cell passes:
        '''),
        code('''
        %gpu_syncs error
        '''),
        code('''
        %%gpu --quiet
        y = np.sqrt(x)
        for step in range(STEPS):
            y = y * np.where(y.max() > 0.5, np.float32(0.999), np.float32(1.0))
        '''),
        code('''
        %gpu_syncs warn
        '''),
        md('''
        ## 6. Warm-up: the first call compiles

        CuPy compiles each kind of GPU operation (for each dtype) the first time it is used,
        then keeps the compiled kernel. The first run of a cell with new operations is therefore
        slower. Time the same cell twice (these functions were not used above):
        '''),
        code('''
        print("kernel cache:", "a fresh, empty folder" if FRESH_KERNEL_CACHE
              else "CuPy was imported before this notebook: kernels may come from an earlier run")
        '''),
        code('''
        %%gpu
        z = np.tanh(x) ** 2 + np.cos(x) * np.exp(-x)
        '''),
        code('''
        first = cupy_magic.last_report()
        get_ipython().run_cell_magic("gpu", "--quiet", "z = np.tanh(x) ** 2 + np.cos(x) * np.exp(-x)")
        second = cupy_magic.last_report()
        print(f"first run {first.gpu_seconds * 1e3:.2f} ms, second run {second.gpu_seconds * 1e3:.2f} ms: "
              f"first / second = {first.gpu_seconds / second.gpu_seconds:.1f} ({info.name})")
        '''),
        md('''
        On a GPU the first run's wall time carries the compilation (its report's `compile`
        line says how long). The GPU time printed above leaves the compiling out, and the first
        run's can still be the longer: it also loads each new kernel onto the GPU at its first
        launch. On the CPU fallback nothing is compiled and the two runs take about the same
        time.

        Before timing or a long production run, run once on small data. `--warmup` does that for
        you: it runs the cell on the first rows of its inputs, then times the real run. It takes
        at least 4,096 elements: CuPy compiles a reduction (a sum, a maximum) for the number of
        GPU threads it picks from the reduced length, so on a much smaller slice it would
        compile other kernels than the real run needs. Again with functions not used before:
        '''),
        code('''
        %%gpu --warmup
        w = np.arctan(x) * np.log1p(x)
        '''),
        code('''
        r = cupy_magic.last_report()
        print(f"warm-up on {r.warmup_rows:,} elements {r.warmup_seconds * 1e3:.2f} ms; "
              f"the timed run on {N:,} elements {r.gpu_seconds * 1e3:.2f} ms")
        '''),
        md('''
        ## 7. Where the time goes, line by line: `--lines`

        A slow cell of several lines does not say which line is slow. `%%gpu --lines` adds a
        table to the report: one row per line that ran, with how many times it ran (a line in a
        loop sums its iterations), its time, and the line's share of the cell; `*` marks the
        hottest line and says what to try for it. On a GPU the rows also have each line's GPU
        time (CUDA events at the line boundaries), the bytes it copied between host and device,
        its host syncs with the time the host waited at them, and kernel compile time; on the
        CPU fallback they have host time only, since there is no device to time or wait for.

        This cell takes the maximum of each of 500 chunks of `y`, one chunk at a time:
        '''),
        code('''
        CHUNKS = 500
        SIZE = N // CHUNKS
        '''),
        code('''
        %%gpu --lines
        y = np.sqrt(x)
        peaks = []
        for c in range(CHUNKS):
            block = y[c * SIZE:(c + 1) * SIZE]
            peaks.append(float(block.max()))     # one value to the host per chunk
        peaks = np.array(peaks)
        '''),
        code('''
        slow = cupy_magic.last_report()
        hot = max(slow.lines, key=lambda s: s.share)
        loop = sum(s.share for s in slow.lines if s.count >= CHUNKS)
        print(f"hottest: line {hot.line} `{hot.code}`, ran {hot.count} times, {hot.share:.0%} of the cell")
        print(f"the lines inside the loop together: {loop:.0%} of the cell")
        if hot.gpu_s is not None:
            print(f"on {info.name}: its GPU time {hot.gpu_s * 1e3:.2f} ms, host time "
                  f"{hot.host_s * 1e3:.2f} ms, {hot.syncs or 0} host syncs, waiting "
                  f"{(hot.wait_s or 0) * 1e3:.2f} ms at them")
        else:
            print(f"on the CPU fallback: its host time {hot.host_s * 1e3:.2f} ms")
        '''),
        md('''
        The printed lines say where the time went on this machine. The loop asks the device for
        one small maximum per chunk: each iteration launches a small reduction and (on a GPU)
        waits for its value. A 2-D view of the same memory, one chunk per row, gives every
        chunk's maximum in one operation, and the values stay on the device:
        '''),
        code('''
        %%gpu --lines
        y = np.sqrt(x)
        peaks = y[:CHUNKS * SIZE].reshape(CHUNKS, SIZE).max(axis=1)
        '''),
        md('''
        Following the lines costs time of its own (the report's `note` says how much when it is
        large), so compare the two cells without `--lines`:
        '''),
        code('''
        CHUNK_LOOP = """
        y = np.sqrt(x)
        peaks = []
        for c in range(CHUNKS):
            block = y[c * SIZE:(c + 1) * SIZE]
            peaks.append(float(block.max()))
        peaks = np.array(peaks)
        """
        CHUNK_ROWS = """
        y = np.sqrt(x)
        peaks = y[:CHUNKS * SIZE].reshape(CHUNKS, SIZE).max(axis=1)
        """
        ns = {"np": np, "x": x, "CHUNKS": CHUNKS, "SIZE": SIZE}
        t_loop = best_run(CHUNK_LOOP, ns, to_host=["peaks"]).gpu_seconds
        loop_peaks = ns["peaks"]
        t_rows = best_run(CHUNK_ROWS, ns, to_host=["peaks"]).gpu_seconds
        print(f"chunk by chunk {t_loop * 1e3:.2f} ms; all chunks at once {t_rows * 1e3:.2f} ms: "
              f"{t_loop / t_rows:.1f}x ({info.name}); same maxima: {np.array_equal(loop_peaks, ns['peaks'])}")
        '''),
        md('''
        The ratio printed is what the rewrite bought here. On a GPU it removes two costs that
        the first table showed on the loop's lines: 500 launches of small kernels become one,
        and the host no longer waits for the device at every chunk. On the CPU fallback there is
        no device to wait for, and the ratio is the Python loop's overhead alone.

        With `--nvtx` (or `--lines`) each line is also an NVTX range named after the cell and
        line. NVTX ranges are named marks that NVIDIA's profilers show; in a timeline from
        `nsys` (Nsight Systems) of a GPU run, they line the GPU's work up with the cell's lines.
        '''),
        md('''
        ## Exercises

        **Exercise 1: a convergence loop.** Newton's method for the square root, stopping when
        the update is small. How many host syncs does it make? Rewrite it so the device never
        waits for Python inside the loop (hint: a fixed number of steps, one check at the end).
        '''),
        code('''
        a = x + 1.0     # values in [1, 2)
        '''),
        code('''
        %%gpu --warmup
        r = np.ones_like(a)
        err = 1.0
        while err > 1e-6:
            r_new = 0.5 * (r + a / r)
            err = float(np.abs(r_new - r).max())
            r = r_new
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        %%gpu --warmup
        r = np.ones_like(a)
        for it in range(6):               # no decision on the host: Newton doubles the correct
                                          # digits each step; 6 steps from 1 reach float32's
                                          # precision for a in [1, 2)
            r = 0.5 * (r + a / r)
        err = np.abs(r * r - a).max()     # one check, kept on the device as a 0-d array
        '''),
        solution('''
        print("host syncs reported:", len(cupy_magic.last_report().syncs), "; error:", float(err))
        '''),
        md('''
        **Exercise 2: find the sync.** This cell has no loop, `if` or `print`, and still makes
        the host wait. Run it, read the report, and rewrite it so that it does not.
        '''),
        code('''
        %%gpu --to-host
        pos_mean = x[x > 0.5].mean()
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        %%gpu --to-host pos_mean_2
        keep = x > 0.5                                  # the mask stays on the device
        pos_mean_2 = np.where(keep, x, 0).sum() / keep.sum()
        '''),
        solution('''
        print(pos_mean, pos_mean_2, "same:", np.isclose(pos_mean, pos_mean_2))
        '''),
        md('''
        About the timings in exercise 2: both cells use kernels for the first time in this
        notebook (the mask, `where`, the sums) and neither has `--warmup`. So both compile
        them (the `compile` lines), and both GPU times count loading them onto the GPU at
        their first launch (section 6); they do not compare the two versions. Add `--warmup`
        to both to compare them warm.
        '''),
        md('''
        ## What you learned

        - Python queues GPU work and moves on; a line that needs a device *value* (`if`, `print`,
          `float`, a boolean mask) makes the host wait: a host sync.
        - `%%gpu` reports each such line with its number, why it syncs and what to write
          instead; on a GPU it counts how often it happened. `--syncs error` (or `%gpu_syncs
          error`) stops at the first one.
        - Keep decisions on the device (`np.where`, `np.any` kept as an array), print once after
          the loop, and vectorise element-by-element loops.
        - The first call of a new operation compiles it; warm up before timing (`--warmup`).
        - `%%gpu --lines` shows where a cell's time goes, line by line (runs, time, share; on a
          GPU also GPU time, bytes moved, syncs and the wait at them) and marks the hottest
          line with what to try.
        '''),
    ])


# ---------------------------------------------------------------------------------------
# 05 checklist
# ---------------------------------------------------------------------------------------

def nb05():
    return notebook([
        md('''
        # 05 The tuning checklist, measured

        | check | action | gain |
        | --- | --- | --- |
        | vectorise | replace Python `for` loops with array operations | very high |
        | coalesced access | neighbouring threads read neighbouring addresses: structure of arrays | high |
        | memory pool | give cached blocks back (`cupy_magic.free_cached()`) | avoids out-of-memory in long runs |
        | pinned memory | page-locked host memory for transfers | faster transfers (section 4 measures uploads) |

        Each section measures one row on the machine running this notebook; section 5 adds a
        check the table does not list: NumPy code CuPy cannot run, and what running it on the
        host costs. On a machine without a GPU the cells run on NumPy (the CPU fallback) with
        smaller sizes; the GPU effects then show up differently or not at all, and the text
        says what to expect.
        '''),
        code(LOAD),
        code(SETUP),
        SETUP_NOTE,
        md('''
        ## 1. Vectorise

        The same result, element by element in a Python loop and as one array operation, on the
        host (NumPy) and on the device `%%gpu` runs on:
        '''),
        code('''
        K = 2000
        x = np.random.default_rng(0).random(K, dtype=np.float32)
        LOOP = """
        out = np.empty(K, dtype=x.dtype)
        for i in range(K):
            out[i] = x[i] * 2 + 1
        """
        VECTOR = "out = x * 2 + 1"
        for backend in dict.fromkeys(["host", DEVICE]):
            ns = {"np": np, "x": x, "K": K}
            t_loop = best_run(LOOP, ns, repeat=1, backend=backend).gpu_seconds
            t_vec = best_run(VECTOR, ns, repeat=5, backend=backend).gpu_seconds
            where = "NumPy on the CPU" if backend == "host" else info.name
            print(f"{where:24} loop {t_loop * 1e3:9.2f} ms   vectorised {t_vec * 1e3:7.3f} ms   "
                  f"{t_loop / t_vec:8.0f}x")
        _ = cupy_magic.use_backend(DEVICE)
        '''),
        md('''
        A loop is slow on the CPU, and slower still on a GPU: every iteration launches tiny
        device operations, each with a fixed cost, and the GPU's thousands of cores sit idle. On
        the CPU fallback both lines are NumPy.

        ## 2. Structure of arrays, not array of structures

        Particles with 8 fields each (x, y, z, vx, vy, vz, mass, charge), stored two ways:

        - **array of structures** (AoS): shape `(n, 8)`, one row per particle. The x values of
          neighbouring particles are 32 bytes apart.
        - **structure of arrays** (SoA): shape `(8, n)`, one row per field. The x values are
          next to each other.

        GPU threads run in groups of 32 that read memory together. When neighbouring threads
        read neighbouring addresses (SoA), the reads *coalesce* into a few wide transactions;
        when they are 32 bytes apart (AoS), the device fetches whole segments to use 4 bytes of
        each. The update `position += velocity * dt` in both layouts:
        '''),
        code('''
        NP = 2**25 if ON_GPU else 2**20     # particles: 1 GiB per layout on a GPU
        dt = 0.01
        '''),
        code('''
        %%gpu --quiet
        aos = np.zeros((NP, 8), dtype=np.float32)    # one row per particle
        aos[:, 3:6] = 1.0
        soa = np.zeros((8, NP), dtype=np.float32)    # one row per field
        soa[3:6] = 1.0
        '''),
        code('''
        AOS = """
        aos[:, 0] += aos[:, 3] * dt
        aos[:, 1] += aos[:, 4] * dt
        aos[:, 2] += aos[:, 5] * dt
        """
        SOA = """
        soa[0] += soa[3] * dt
        soa[1] += soa[4] * dt
        soa[2] += soa[5] * dt
        """
        t_aos = best_run(AOS, repeat=5).gpu_seconds
        t_soa = best_run(SOA, repeat=5).gpu_seconds
        useful = 3 * 3 * 4 * NP      # 3 lines, each reads 2 and writes 1 float32 per particle
        for name, t in [("array of structures", t_aos), ("structure of arrays", t_soa)]:
            print(f"{name:20} {t * 1e3:8.2f} ms   {useful / t / 1e9:8.1f} GB/s of useful data")
        print(f"structure of arrays is {t_aos / t_soa:.1f}x faster on {info.name}")
        '''),
        code('''
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.barh(["array of structures\\n(n, 8)", "structure of arrays\\n(8, n)"],
                [t_aos * 1e3, t_soa * 1e3], color=["#c66", "#4a4"])
        ax.set_xlabel("time for one update (ms), shorter is better")
        ax.set_title(f"{NP:,} particles on {info.name}, {time.strftime('%Y-%m-%d')}")
        plt.tight_layout()
        plt.show()
        '''),
        md('''
        On a GPU the structure of arrays is clearly faster: the same arithmetic, fewer memory
        transactions. The CPU fallback shows an effect of the same kind, of a size that depends
        on the CPU (its cache lines also load neighbours that the AoS update does not use).

        ## 3. The memory pool

        CuPy does not hand freed device memory back to the driver: it keeps the blocks in a
        *pool* and reuses them, because asking the driver for memory is slow. So the pool
        **holds** more than your arrays **use**. A long run that allocates many different sizes
        can leave much memory cached: free for CuPy, but not for another process or a library
        that allocates outside CuPy's pool, and split into blocks of sizes that a later, larger
        request may not fit (fragmentation). `cupy_magic.free_cached()` (CuPy's
        `free_all_blocks`) gives the cached blocks back.
        '''),
        code('''
        BLOCK = 2**24 if ON_GPU else 2**16          # float32 elements: 64 MiB on a GPU
        cupy_magic.free_cached()

        def pool(label):
            s = cupy_magic.budget_status()
            print(f"{label:34} used {s.pool_used / 2**20:9.0f} MiB   held {s.pool_held / 2**20:9.0f} MiB   "
                  f"cached {(s.pool_held - s.pool_used) / 2**20:9.0f} MiB")

        pool("before")
        '''),
        code('''
        %%gpu --quiet
        blocks = [np.empty(int(BLOCK * (1 + i % 5)), dtype=np.float32) for i in range(40)]
        keep = blocks[::2]       # a long run keeps some results and drops the others
        del blocks
        '''),
        code('''
        pool("after: every other block kept")
        del keep
        pool("after del keep")
        print(f"free_cached() released {cupy_magic.free_cached() / 2**20:.0f} MiB")
        pool("after free_cached()")
        '''),
        md('''
        On a GPU, "held" stays high after `del`: the blocks went to the pool, not back to the
        device, until `free_cached()`. On the CPU fallback there is no pool: NumPy gives freed
        memory back at once, so nothing is cached and "held" is the same as "used" (the arrays
        that cells made).

        `%vram_budget` (no argument) shows the same figures with the device's total:
        '''),
        code("%vram_budget"),
        md('''
        ### The live panel

        `%vram_panel` shows the same figures live while cells run, with the device's memory,
        utilisation, PCIe traffic and a fragmentation figure (the largest free block against
        the free bytes), and a button that releases cached blocks. The next cell starts it;
        watch the pool grow while the cells below run the allocations of section 3 again.
        `free_cached()` (or the button) shrinks it. Without a widget frontend (for example
        when this notebook is run as a script), `%vram_panel --text` prints one summary.
        '''),
        code("%vram_panel"),
        md('''
        The panel's device total comes from NVML, the driver's management library, and is the
        device's physical memory; the total CUDA reports (printed by the setup cell, and used by
        `%vram_budget`) leaves out what the driver reserves for itself, so it is a little smaller.
        '''),
        code('''
        %%gpu --quiet
        blocks = [np.empty(int(BLOCK * (1 + i % 5)), dtype=np.float32) for i in range(40)]
        keep = blocks[::2]
        del blocks
        '''),
        code("%vram_panel --text"),
        code('''
        del keep
        cupy_magic.free_cached()
        %vram_panel --text
        '''),
        code("%vram_panel --stop"),
        md('''
        ## 4. Pinned memory

        The driver can copy over PCIe only from *page-locked* (pinned) host memory, which the
        operating system may not move. From ordinary *pageable* memory a copy goes through a
        pinned staging buffer first, which is slower. `%%gpu` page-locks large NumPy inputs for
        you, and keeps them locked while the array lives; the report says *pinned* or *pageable*
        for each input. Memory that NumPy does not own itself (for example an array made with
        `np.frombuffer` over a `bytearray`, or a memory map) is left pageable.
        '''),
        code('''
        import cupy_magic.backend
        print(f"on a GPU, contiguous NumPy-owned inputs of {cupy_magic.backend.REGISTER_MIN_BYTES / 2**20:.0f} MiB "
              "or more are page-locked")
        big = 2**28 if ON_GPU else 2**24            # float32 elements: 1 GiB on a GPU
        rng = np.random.default_rng(1)
        inputs = {
            "small, NumPy-owned": rng.random(2**20, dtype=np.float32),
            "large, NumPy-owned": rng.random(big, dtype=np.float32),
        }
        foreign = np.frombuffer(bytearray(big * 4), dtype=np.float32)
        foreign[:] = inputs["large, NumPy-owned"]
        inputs["large, bytearray-owned"] = foreign

        print(f"{'input':24} {'MiB':>7} {'kind':>9} {'1st GB/s':>9} {'best GB/s':>10}")
        for name, v in inputs.items():
            runs = [cupy_magic.run_cell("s = v.sum()", {"np": np, "v": v}, syncs="off") for _ in range(4)]
            first, best = runs[0].inputs[0], max((r.inputs[0] for r in runs[1:]), key=lambda m: m.gbps)
            print(f"{name:24} {v.nbytes / 2**20:7.0f} {'pinned' if best.pinned else 'pageable':>9} "
                  f"{first.gbps:9.1f} {best.gbps:10.1f}")
        '''),
        md('''
        On a GPU, the small array stays pageable (locking it would cost more than it saves) and
        the large NumPy-owned array is pinned: its first transfer also pays for
        page-locking, the later ones run at the bus's pinned rate. The same bytes owned by a
        `bytearray` stay pageable and move more slowly every time. On the CPU fallback every
        "transfer" is a copy in host RAM and nothing is pinned.

        ## 5. Code CuPy cannot run, and what `--fallback` costs

        Inside `%%gpu`, `np` is CuPy, which has most of NumPy but not all of it: some names are
        missing (`np.nditer`, `np.ndenumerate`, `np.emath`, `np.insert`), some options too
        (`np.nanmean(x, where=...)`), and string and date dtypes. A cell that calls one stops there
        with one line: the function, the cell line, why, and the CuPy way to write it. (Python
        lists passed where NumPy takes an array need nothing: they are moved to the device and
        the report counts them.) This cell is meant to fail (where CuPy is not installed, the
        load line says that CuPy's limits are not checked, and it runs):
        '''),
        fails('''
        %%gpu
        grid = np.random.default_rng(5).random((64, 64), dtype=np.float32)
        count = 0
        for v in np.nditer(grid):        # element by element, as NumPy allows
            if v > 0.5:
                count += 1
        '''),
        md('''
        The CuPy way the message gives is one whole-array expression; the count stays on the
        device:
        '''),
        code('''
        %%gpu
        grid = np.random.default_rng(5).random((64, 64), dtype=np.float32)
        count = (grid > 0.5).sum()
        '''),
        md('''
        When a rewrite is not at hand (or you want the notebook to run first and port it
        later), `%%gpu --fallback` (or `%gpu_fallback on` for the session) runs such a call with
        NumPy: its device arguments are copied to the host, NumPy computes there, and array
        results are copied back to the device. The report's `fallback` row says, per function
        and line, how many calls, the bytes each way and the time they took, and what to write
        instead. `np.emath.sqrt`, a square root that gives complex results for negative
        numbers, is one that CuPy lacks:
        '''),
        code('''
        NF = 2**25 if ON_GPU else 2**20     # float32: 128 MiB on a GPU, 4 MiB on the CPU fallback
        '''),
        code('''
        %%gpu --quiet
        v = np.random.default_rng(6).standard_normal(NF, dtype=np.float32)   # made on the device
        '''),
        code('''
        %%gpu --fallback
        roots = np.emath.sqrt(v)
        '''),
        md('''
        What the fallback costs, measured here: the same cell with `--fallback` and written the
        CuPy way, `np.sqrt(v.astype(np.complex64))`, best of 3. The times are wall times: the
        fallback's work happens on the host and on the bus, which the device's own time would
        not show.
        '''),
        code('''
        r_fb = best_run("roots = np.emath.sqrt(v)", fallback=True, key="wall_seconds")
        r_cp = best_run("roots = np.sqrt(v.astype(np.complex64))", key="wall_seconds")
        if r_fb.fallbacks:
            row = r_fb.fallbacks[0]
            print(f"{row.function} on line {row.line}: {row.calls} call, {row.to_host_bytes / 2**20:.0f} MiB "
                  f"to the host, {row.to_device_bytes / 2**20:.0f} MiB back, {row.seconds * 1e3:.2f} ms in the call")
        else:  # without CuPy nothing is known to be missing, so nothing fell back
            print("no fallback row: CuPy is not installed here, so np.emath.sqrt ran as NumPy's; "
                  "pip install cupy-cuda13x (cupy-cuda12x for CUDA 12) checks cells against CuPy, without a GPU too")
        print(f"with --fallback {r_fb.wall_seconds * 1e3:.2f} ms; the CuPy way {r_cp.wall_seconds * 1e3:.2f} ms: "
              f"the fallback takes {r_fb.wall_seconds / r_cp.wall_seconds:.1f}x as long ({info.name})")
        '''),
        md('''
        The first line is the fallback row: the input went to the host and a complex result,
        twice its bytes, came back (on a GPU over PCIe; on the CPU fallback as copies in host
        RAM), and NumPy computed on the CPU in between. The second line is what that cost on
        this machine against the CuPy way. So `--fallback` is a way to run a cell now, not to
        run it fast: read its rows and replace each call with what the row says. In a loop every
        call is another round trip, and the report flags such a row like a host sync (it is
        one): exercise 3 shows it.

        ## Exercises

        **Exercise 1: vectorise a loop with a branch.** Rewrite this loop as one array
        operation, check that the results agree, and measure both on the device.
        '''),
        code('''
        CLIP_LOOP = """
        out = np.empty(K, dtype=x.dtype)
        for i in range(K):
            if x[i] > 0.9:
                out[i] = 0.9
            else:
                out[i] = x[i]
        """
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        CLIP_VECTOR = "out = np.minimum(x, 0.9)"
        r_loop = best_run(CLIP_LOOP, {"np": np, "x": x, "K": K}, repeat=1, to_host=True)
        r_vec = best_run(CLIP_VECTOR, {"np": np, "x": x, "K": K}, repeat=5, to_host=True)
        ns_loop, ns_vec = {"np": np, "x": x, "K": K}, {"np": np, "x": x, "K": K}
        cupy_magic.run_cell(CLIP_LOOP, ns_loop, to_host=True, syncs="off")
        cupy_magic.run_cell(CLIP_VECTOR, ns_vec, to_host=True, syncs="off")
        print("same result:", np.array_equal(ns_loop["out"], ns_vec["out"]))
        print(f"loop {r_loop.gpu_seconds * 1e3:.2f} ms, vectorised {r_vec.gpu_seconds * 1e3:.3f} ms: "
              f"{r_loop.gpu_seconds / r_vec.gpu_seconds:.0f}x ({info.name})")
        '''),
        md('''
        **Exercise 2: kinetic energy in both layouts.** Compute
        `0.5 * mass * (vx² + vy² + vz²)` for every particle from `aos` and from `soa` (mass is
        field 6), and measure both.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        KE_AOS = "ke = 0.5 * aos[:, 6] * (aos[:, 3] ** 2 + aos[:, 4] ** 2 + aos[:, 5] ** 2)"
        KE_SOA = "ke = 0.5 * soa[6] * (soa[3] ** 2 + soa[4] ** 2 + soa[5] ** 2)"
        t_aos_ke = best_run(KE_AOS, repeat=5).gpu_seconds
        t_soa_ke = best_run(KE_SOA, repeat=5).gpu_seconds
        print(f"AoS {t_aos_ke * 1e3:.2f} ms, SoA {t_soa_ke * 1e3:.2f} ms: SoA is "
              f"{t_aos_ke / t_soa_ke:.1f}x faster ({info.name})")
        del ke
        '''),
        md('''
        **Exercise 3: a fallback in a loop.** This cell averages the positive values of each
        row with `np.nanmean(..., where=...)`, an option CuPy's `nanmean` does not have, so it needs
        `--fallback`. Read its `fallback` row (calls, bytes, the loop flag), then write the
        means without a fallback, check that they agree, and compare the two times.
        '''),
        code('''
        ROWS = 200
        '''),
        code('''
        %%gpu --fallback
        table = v[:ROWS * 1024].reshape(ROWS, 1024)
        pos = np.empty(ROWS, dtype=np.float32)
        for i in range(ROWS):
            pos[i] = np.nanmean(table[i], where=table[i] > 0)
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        %%gpu --to-host same
        pos_2 = np.where(table > 0, table, 0).sum(axis=1) / (table > 0).sum(axis=1)  # all rows
        same = np.allclose(pos, pos_2, rtol=1e-4)
        '''),
        solution('''
        LOOP_CELL = """
        for i in range(ROWS):
            pos[i] = np.nanmean(table[i], where=table[i] > 0)
        """
        t_fb = best_run(LOOP_CELL, fallback=True, key="wall_seconds").wall_seconds
        t_dev = best_run("pos_2 = np.where(table > 0, table, 0).sum(axis=1) / (table > 0).sum(axis=1)",
                         key="wall_seconds").wall_seconds
        print(f"same means: {bool(same)}; --fallback in a loop {t_fb * 1e3:.2f} ms, one device "
              f"expression {t_dev * 1e3:.3f} ms: {t_fb / t_dev:.0f}x ({info.name})")
        '''),
        code('''
        del aos, soa, inputs, foreign, grid, count, v, roots, table, pos
        for name in ("pos_2", "same"):      # if the exercise made them
            globals().pop(name, None)
        print(f"released {cupy_magic.free_cached() / 2**20:.0f} MiB of cached blocks")
        '''),
        md('''
        ## What you learned

        - Vectorise: a Python loop over elements is slow on the CPU and slower on a GPU
          (section 1 printed by how much here).
        - Lay data out as a structure of arrays so that neighbouring threads read neighbouring
          addresses (coalesced access).
        - The pool holds freed blocks for reuse; `cupy_magic.free_cached()` gives them back, and
          `%vram_budget` shows used, held and cached memory.
        - Transfers from pinned memory are faster; `%%gpu` pins large NumPy inputs itself, and
          the report says pinned or pageable for each one.
        - NumPy code CuPy cannot run stops with one line naming the call and the CuPy way to
          write it; `--fallback` runs such calls with NumPy and reports each one (calls, bytes
          each way, time). Section 5 measured what that costs here: run the cell now, then
          replace the calls its rows name.
        '''),
    ])


# ---------------------------------------------------------------------------------------
# 06 beyond one GPU
# ---------------------------------------------------------------------------------------

def nb06():
    return notebook([
        md('''
        # 06 Beyond one GPU: the same cell on a Dask cluster

        Data many times the VRAM, or a node of several GPUs, or a cluster behind JupyterHub:
        `%%gpu` does not grow a scheduler of its own for these. It hands the cell to Dask
        (`distributed`, with `dask-cuda` for GPU workers). Dask cuts an array into blocks and
        a *scheduler* hands them out as tasks to *workers*, processes that may each drive a
        GPU. Each worker runs the cell on its blocks of rows, under the same promise batching
        rests on (notebook 03): **each row's results depend only on that row**.

        In this notebook *the kernel* means the Jupyter kernel, the Python process that runs
        your cells (not a GPU kernel), as opposed to the workers.

        This notebook runs one cell three ways: in the kernel, batched in the kernel, and on a
        local cluster (`%gpu_cluster local`: one worker per GPU with `dask-cuda` on a GPU
        machine, two worker processes on loopback on the CPU fallback). Then it measures what
        crosses the network and when a cluster pays for itself. On a machine without a GPU the
        cells run on NumPy with smaller sizes; every figure is printed by a cell.
        '''),
        code(LOAD),
        code(SETUP),
        SETUP_NOTE,
        md('''
        ## 1. One cell, three ways

        The cell: an element-wise expression with a small weight vector `w` every row reads,
        and a row-wise norm. First in the kernel, then batched (`--batch`: the kernel streams
        the rows through the device in batches):
        '''),
        code('''
        import dask.array as da

        N = 2**26 if ON_GPU else 2**19            # rows of 4 float32: 1 GiB on a GPU, 8 MiB here
        x = np.random.default_rng(0).random((N, 4), dtype=np.float32)
        w = np.array([1, 2, 3, 4], dtype=np.float32)   # small: every block reads all of it
        runs = {}
        print(f"x: {x.nbytes / 2**20:,.0f} MiB, w: {w.nbytes} bytes")
        '''),
        code('''
        %%gpu --to-host --quiet
        y = np.sqrt(x) * w + 1
        norm = np.linalg.norm(x, axis=1)
        '''),
        code('''
        runs["in the kernel"] = cupy_magic.last_report()
        y_kernel, norm_kernel = y, norm
        '''),
        code('''
        %%gpu --to-host --quiet --batch
        y = np.sqrt(x) * w + 1
        norm = np.linalg.norm(x, axis=1)
        '''),
        code('''
        runs["batched"] = cupy_magic.last_report()
        print("batched: same results", np.array_equal(y, y_kernel) and np.allclose(norm, norm_kernel),
              f"in {runs['batched'].batch.batches} batches")
        '''),
        md('''
        Now a cluster. `%gpu_cluster local` starts one on this machine and lists its workers
        (their device, memory and budget); `%gpu_cluster tcp://HOST:8786` would join a running
        scheduler instead, and `cupy_magic.use_cluster(client)` a `distributed.Client` you
        made. The device line says which cluster is in use:
        '''),
        code('''
        %gpu_cluster local
        '''),
        code('''
        %gpu_backend
        '''),
        md('''
        `--cluster` sends the same cell to the cluster: the kernel cuts `x` into blocks of rows
        and hands them to the workers (through device slots by CUDA IPC when they compute on
        this kernel's own GPU, through shared memory when they run on this machine, as a local
        cluster's do; scattered over the network otherwise: the report's `cluster transport:`
        line says which), sends `w` once to every worker, and each block runs the
        cell as it runs here. The report has a row per worker:
        '''),
        code('''
        %%gpu --to-host --cluster
        y = np.sqrt(x) * w + 1
        norm = np.linalg.norm(x, axis=1)
        '''),
        code('''
        runs["on the cluster"] = cupy_magic.last_report()
        print("cluster: same results", np.array_equal(y, y_kernel) and np.allclose(norm, norm_kernel))
        for name, r in runs.items():
            print(f"{name:15} {r.wall_seconds * 1e3:9.1f} ms   "
                  f"{x.nbytes / r.wall_seconds / 1e9:6.2f} GB/s of x, wall clock ({info.name})")
        '''),
        md('''
        ## 2. What crosses the network

        With `--cluster` the data starts in this kernel, so all of it goes to the workers and,
        with `--to-host`, the results come back. On one machine it goes through shared memory:
        the kernel copies each block into a slot of a ring it keeps, the worker reads it there
        (page-locked, so its uploads run at full speed) and writes its results back into the
        slot. When the workers compute on the kernel's own GPU (a `LocalCUDACluster` on a one-GPU
        machine) the slots are on the GPU instead: the kernel copies each block there at its
        page-locked speed and the worker opens the slot by its CUDA IPC handle, so the data
        never crosses between processes on the host. Between machines every block crosses the
        network (scattered, and gathered back).
        `w` crosses once per worker, not once per block, and each worker copies it to its
        device once per cell. The report's cluster rows hold the figures:
        '''),
        code('''
        c = runs["on the cluster"].batch
        print("transport:", c.transport.describe() if c.transport else "scatter")
        if c.transport is not None and c.transport.kind == "shm":
            print(f"through shared memory: {c.input_bytes / 2**20:,.0f} MiB of x; this kernel's "
                  f"copies into and out of the slots took {c.copy_seconds * 1e3:.0f} ms")
        else:
            print(f"scattered from the kernel: {c.input_bytes / 2**20:,.0f} MiB in "
                  f"{c.scatter_seconds * 1e3:.0f} ms "
                  f"({c.input_bytes / max(c.scatter_seconds, 1e-9) / 1e9:.2f} GB/s)")
        print(f"blocks: {c.blocks}; run {c.run_seconds * 1e3:.0f} ms, of which {c.scheduler_seconds * 1e3:.0f} ms "
              "outside the busiest worker's blocks (scheduler, transfers, serialisation)")
        for wk in c.workers:
            print(f"  {wk.worker}: {wk.blocks} blocks, {wk.nbytes / 2**20:,.0f} MiB in, "
                  f"{wk.seconds * 1e3:.0f} ms busy, w copied to its device {wk.uploads}x")
        '''),
        md('''
        A Dask array is different: its blocks are made where they are computed. An array
        Dask builds on the workers (read from storage there, or generated, as here) never
        passes through the kernel, and a result without `--to-host` stays on the workers as a
        Dask array of device blocks: only what you ask for comes back.
        '''),
        code('''
        xd = da.random.random((N, 4), chunks=(N // 8, 4)).astype(np.float32)   # made on the workers
        xd
        '''),
        code('''
        %%gpu --quiet
        yd = np.sqrt(xd) * w + 1
        '''),
        code('''
        d = cupy_magic.last_report().batch
        print(f"scattered from the kernel: {', '.join(d.scattered) or 'none of the blocks'} "
              f"(shared: {', '.join(d.shared)}); kept on the workers: {', '.join(d.kept)}")
        print(f"{d.blocks} blocks in {d.run_seconds * 1e3:.0f} ms; yd is {type(yd).__module__}.{type(yd).__name__}")
        print("its first two rows, the only ones fetched:", yd[:2].compute())
        '''),
        md('''
        ## 3. When the cluster is worth it

        Every block costs a fixed amount beyond its own work: the scheduler picks a worker,
        the task and its inputs are serialised and sent, the result's description comes back.
        A cell over many tiny blocks measures that cost:
        '''),
        code('''
        tiny = da.ones((64 * 100, 4), chunks=(100, 4))
        '''),
        code('''
        %%gpu --quiet --reduce s=sum
        s = tiny.sum()
        '''),
        code('''
        t = cupy_magic.last_report().batch
        per_block = t.run_seconds / t.blocks
        big = runs["on the cluster"].batch
        work = sum(wk.seconds for wk in big.workers) / big.blocks
        print(f"s = {s} over {t.blocks} blocks: about {per_block * 1e3:.1f} ms a block beyond its work")
        print(f"a block of section 1 worked {work * 1e3:.1f} ms: {work / per_block:.1f}x the fixed cost "
              f"({len(big.workers)} workers, {info.name})")
        '''),
        md('''
        Read the figures above with these rules:

        - **On one GPU the kernel wins**: batching in the kernel streams rows over PCIe with
          no scheduler, no serialisation and no second copy of the data; a local cluster on
          the same GPU adds all three (through CUDA IPC the second copy is on the GPU).
          `benchmarks/cluster_bench.py` measures the ratio on a GPU with larger data, through
          CUDA IPC and through shared memory.
        - **A cluster pays off** with more devices than one kernel can drive (a node of 8
          GPUs, several nodes), data larger than this machine's memory, or data that already
          lives near the workers (each worker reads its blocks from storage): then nothing
          crosses from the kernel but the cell.
        - **Blocks must be large** next to their fixed cost (section 3): tens of MiB of input
          and more, not thousands of tiny blocks.
        - **Feeding from the kernel** (`--cluster` over a NumPy array) moves every byte
          through this process (through shared memory on one machine, over the network to
          others); it is for comparing the two paths on one array, not the way to feed a
          large cluster.

        ## Exercises

        **1.** Run the cell of section 1 over `xd`, the array made on the workers, with
        `--to-host`, and compare its wall time with the `--cluster` run that fed it `x` from
        the kernel. How much of the `--cluster` run was moving `x` (its report's cluster rows
        say)? Mind that the `xd` run also makes its random numbers, on the workers' CPUs
        (`xd`'s blocks are NumPy arrays), so its total can be the longer although nothing
        crosses from the kernel.
        '''),
        exercise('''
        # your code here
        '''),
        solution('''
        r = cupy_magic.run_cell("y2 = np.sqrt(xd) * w + 1\\nnorm2 = np.linalg.norm(xd, axis=1)",
                                globals(), to_host=True, syncs="off")
        s_ = runs["on the cluster"]
        moving = s_.batch.copy_seconds + s_.batch.scatter_seconds
        print(f"made on the workers {r.wall_seconds * 1e3:.0f} ms, fed from the kernel "
              f"{s_.wall_seconds * 1e3:.0f} ms, of which moving its data {moving * 1e3:.0f} ms "
              f"({s_.batch.transport.kind if s_.batch.transport else 'scatter'})")
        '''),
        md('''
        **2.** The column means of `x` need every row, so a block cannot compute them alone.
        Compute them on the cluster from the NumPy `x` with `--cluster` and a `--reduce` rule
        (the `mean` rule weights each block by its rows), and check them against NumPy.
        (`da.from_array(x)` would work too, but it puts all of `x` inside the task graph,
        which Dask warns about; `--cluster` hands the blocks to the workers instead.)
        '''),
        exercise('''
        # your code here: a %%gpu cell with --cluster and --reduce
        '''),
        solution('''
        %%gpu --cluster --to-host --quiet --reduce m=mean
        m = x.mean(axis=0)
        '''),
        solution('''
        exact = x.mean(axis=0, dtype=np.float64)   # float32 sums of N rows drift; compare in float64
        print("column means", m, "equal to NumPy's in float64:", np.allclose(m, exact, rtol=1e-5))
        '''),
        md('''
        The panel watches the workers too: with a cluster in use, `%vram_panel` has a row per
        worker, read on that worker (its GPU's memory and utilisation, or on the CPU fallback
        its process's memory and CPU use; its pool and budget), not from this kernel's own
        NVML. A worker that stops answering reads N/A, and one that leaves disappears.
        '''),
        code('''
        %vram_panel
        '''),
        code('''
        %vram_panel --stop
        '''),
        code('''
        %gpu_cluster off
        '''),
        code('''
        del x, y, norm, y_kernel, norm_kernel, xd, yd, tiny
        for name in ("y2", "norm2", "m"):      # if the exercises made them
            globals().pop(name, None)
        print(f"released {cupy_magic.free_cached() / 2**20:.0f} MiB of cached blocks")
        '''),
        md('''
        ## What you learned

        - `%gpu_cluster local | ADDRESS | off | show` (or `cupy_magic.use_cluster`) picks the
          Dask cluster cells run on; the device line and `show` say which one is in use.
        - A `%%gpu` cell over a Dask array, or with `--cluster`, runs block by block on the
          workers, unchanged, under the same rule as batching: each row's results depend only
          on that row; a result without a row axis needs a `--reduce` rule.
        - What leaves the kernel: the blocks of its NumPy inputs (through shared memory to
          workers on this machine, scattered over the network to others) and shared inputs (a
          shared input once per worker), and the results you bring back; arrays Dask builds on
          the workers, and results left as Dask arrays, stay there.
        - Each block has a fixed cost (section 3 measured it here): on one GPU the in-kernel
          path is faster; a cluster pays off with more GPUs or machines, data that does not fit
          or already lives near the workers, and large blocks.
        '''),
    ])


NOTEBOOKS = {
    "00_tour.ipynb": nb00,
    "01_host_vs_device.ipynb": nb01,
    "02_vram_budget.ipynb": nb02,
    "03_batching_streams.ipynb": nb03,
    "04_sync_pitfalls.ipynb": nb04,
    "05_checklist.ipynb": nb05,
    "06_beyond_one_gpu.ipynb": nb06,
}


def _keep_outputs(nb, old) -> None:
    """Give ``nb``'s code cells the outputs of ``old``'s cells with the same source.

    A cell first takes the outputs of the old cell with its id and source; the cells left take
    the others of the same source in order. So of two cells with one source (notebook 03 runs
    the same cell twice), neither takes the other's outputs while its own are there.
    """
    runs = {}
    for cell in old.cells:
        if cell.cell_type == "code":
            runs.setdefault(cell.source, []).append(cell)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    taken = {}
    for cell in code_cells:
        same = [c for c in runs.get(cell.source, []) if c.get("id") == cell.get("id")]
        if same:
            taken[id(cell)] = same[0]
            runs[cell.source].remove(same[0])
    for cell in code_cells:
        ran = taken.get(id(cell))
        if ran is None and runs.get(cell.source):
            ran = runs[cell.source].pop(0)
        if ran is not None:
            cell.outputs, cell.execution_count = ran.outputs, ran.execution_count
            if "execution" in ran.metadata:  # when it ran
                cell.metadata["execution"] = ran.metadata["execution"]
    for key, value in old.metadata.items():  # what the run added: language_info, widgets
        if key != "kernelspec":
            nb.metadata[key] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent
                        / "notebooks")
    parser.add_argument("--keep-outputs", action="store_true",
                        help="keep the outputs of the notebooks already in --out for the "
                             "cells whose source did not change (the others get none)")
    parser.add_argument("names", nargs="*", help="notebooks to write (default: all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in NOTEBOOKS.items():
        if args.names and name not in args.names:
            continue
        nb = build()
        if args.keep_outputs and (args.out / name).is_file():
            _keep_outputs(nb, nbformat.read(args.out / name, as_version=4))
        nbformat.validate(nb)
        nbformat.write(nb, args.out / name)
        print("wrote", args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""NumPy's own docstring examples under ``%%gpu --to-host``, against plain NumPy (issue 18).

The examples are read at run time from the installed NumPy with :class:`doctest.DocTestParser`,
from the public functions of ``numpy``, ``numpy.linalg``, ``numpy.fft`` and ``numpy.random``
(nothing of NumPy's is copied into this repository). One example is one docstring's
statements, run as one cell, three ways:

- under plain NumPy (``exec`` with ``np`` bound to NumPy): the reference;
- as ``%%gpu --to-host`` through a real IPython shell with the extension loaded, as a user
  would type it (``InteractiveShell.run_cell``);
- the same with ``%%gpu --to-host --fallback``.

What the harness changes in the statements, the same for all three runs: each top-level
expression statement (what a doctest displays) is assigned to ``doctest_out_<k>`` so it can
be compared; statements marked ``+SKIP``, statements whose documented output is an exception,
matplotlib statements (they only draw) and ``import numpy as np`` (it would rebind ``np`` to
NumPy inside the cell) are left out. An example counts when NumPy's run gives at least one
array or NumPy scalar; it passes when the cell runs and every displayed value and every array
name matches NumPy's (same dtype, same shape, values within a float tolerance). Examples that
draw random numbers (``numpy.random``, or ``random`` in the source) are compared by type,
number of dimensions and dtype only: CuPy's generators give other numbers (and a shape can
depend on them); so are examples of ``np.empty`` (uninitialised memory). Displayed values of
``id(...)`` are not compared.

A failure's cause is the class of the cell's one-line message (``missing in CuPy``,
``dtype``, ``option``, ``NumPy-only code``) or ``other``: a named refusal of another kind, an
error that is not one of the extension's one-line messages (``named`` is false), a different
result, or the per-example timeout.

Usage::

    python benchmarks/numpy_examples.py [--workers 4] [--timeout 30] [--budget 300]

Each example runs in a worker process (a fresh one after a timeout); dispatching stops after
``--budget`` seconds and the examples not reached are counted as not run. Writes
``benchmarks/results/numpy-examples-<UTC time>-<gpu|host>.{json,md}``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import doctest
import inspect
import multiprocessing as mp
import os
import queue
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _results import RESULTS, python, stamp, write

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODULES = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random")
OUT = "doctest_out_"
_DROP_IMPORT = re.compile(r"^\s*import numpy( as np)?\s*$")
_PLOT = re.compile(r"\bplt\b|matplotlib|mpl_toolkits")
CAUSES = {"missing": "missing in CuPy", "dtype": "dtype", "option": "option",
          "device-array": "NumPy-only code", "view": "view"}
TARGETS = {"pass_rate_default": 0.85, "pass_rate_fallback": 0.95}


# --- the examples -----------------------------------------------------------------------
def _statement(source: str, k: int) -> str:
    """``source``, its value assigned to ``doctest_out_<k>`` when it is one expression."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and "id(" not in source:
        return f"{OUT}{k} = (\n{source.rstrip()}\n)\n"
    return source


def collect() -> list[dict[str, Any]]:
    """Every public function's docstring example, once (functions sharing a text: the first)."""
    import importlib

    parser = doctest.DocTestParser()
    seen: set[str] = set()
    examples = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(dir(module)):
            obj = getattr(module, name, None)
            if name.startswith("_") or isinstance(obj, type) or inspect.ismodule(obj) \
                    or not callable(obj):
                continue
            parsed = parser.get_examples(getattr(obj, "__doc__", None) or "")
            key = "".join(e.source for e in parsed)
            if not parsed or key in seen:
                continue
            seen.add(key)
            lines, dropped = [], collections.Counter()
            for e in parsed:
                if e.options.get(doctest.SKIP):
                    dropped["+SKIP"] += 1
                elif e.exc_msg is not None:
                    dropped["documented exception"] += 1
                elif _PLOT.search(e.source):
                    dropped["matplotlib"] += 1
                elif _DROP_IMPORT.match(e.source):
                    dropped["import numpy"] += 1
                else:
                    lines.append(_statement(e.source, len(lines)))
            examples.append({
                "function": f"{module_name}.{name}", "source": "".join(lines),
                "statements": len(lines), "dropped": dict(dropped),
                "loose": _loose(module_name, key)})
    return examples


def _loose(module_name: str, source: str) -> str:
    """Why an example's values are not compared ("" when they are)."""
    if module_name == "numpy.random" or "random" in source:
        return "random numbers"
    return "uninitialised memory (np.empty)" if "np.empty" in source else ""


# --- comparing --------------------------------------------------------------------------
def to_host(value: Any) -> Any:
    """Device arrays (also inside tuples, lists and dicts) as NumPy arrays."""
    if type(value).__module__.startswith("cupy") and hasattr(value, "get"):
        return value.get()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_host(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    return value


def is_array(value: Any) -> bool:
    import numpy

    if isinstance(value, (numpy.ndarray, numpy.generic)):
        return True
    if isinstance(value, (list, tuple)):
        return any(is_array(v) for v in value)
    return False


def differs(ref: Any, got: Any, loose: bool) -> str:
    """Why ``got`` is not NumPy's ``ref`` ("" when it is); ``loose``: type, ndim, dtype only."""
    import numpy

    if isinstance(ref, (list, tuple)) and not isinstance(ref, numpy.ndarray):
        if not isinstance(got, (list, tuple)) or len(got) != len(ref):
            return f"{type(ref).__name__} of {len(ref)} became {type(got).__name__}"
        pairs = zip(ref, got, strict=True)
        return next((d for d in (differs(r, g, loose) for r, g in pairs) if d), "")
    if isinstance(ref, dict):
        if not isinstance(got, dict) or set(got) != set(ref):
            return "dict keys differ"
        return next((d for d in (differs(ref[k], got[k], loose) for k in ref) if d), "")
    numeric = (numpy.ndarray, numpy.generic, int, float, complex)
    if not isinstance(ref, numeric):
        if isinstance(ref, (str, bytes, type(None), numpy.dtype)):
            return "" if ref == got else f"{ref!r} became {got!r}"
        return ""  # other objects (generators, iterators, files): not compared
    if not isinstance(got, numeric):
        return f"{type(ref).__name__} became {type(got).__name__}"
    a, b = numpy.asarray(ref), numpy.asarray(got)
    if a.shape != b.shape and not (loose and a.ndim == b.ndim):
        return f"shape {a.shape} became {b.shape}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} became {b.dtype}"
    if a.size > 10_000_000:  # a strided view over a large buffer: its shape and dtype
        return ""
    if loose or a.dtype.kind in "OSUVMm":
        return "" if loose or numpy.array_equal(a, b) else "values differ"
    if a.dtype.kind in "fc":
        # GPU kernels sum in another order: 10,000 ulps of the largest finite value
        rtol = min(1e-3, 1e4 * float(numpy.finfo(a.dtype).eps))
        finite = numpy.isfinite(a)
        scale = float(numpy.abs(a[finite]).max()) if finite.any() else 0.0
        bad = ~numpy.isclose(b, a, rtol=rtol, atol=rtol * scale, equal_nan=True)
    else:
        bad = a != b
    return "values differ" + _where_differ(a, b, bad) if bad.any() else ""


def _where_differ(a: Any, b: Any, bad: Any) -> str:
    """" at [i]: NumPy 0.5, the cell 0.25 (k of n differ)": the first difference."""
    import numpy

    i = tuple(int(j) for j in numpy.argwhere(bad)[0]) if a.ndim else ()
    return (f" at {list(i)}: NumPy {a[i]!r}, the cell {b[i]!r} ({int(bad.sum())} of {a.size} "
            "differ)")


def compared(namespace: dict[str, Any]) -> dict[str, Any]:
    """The values to compare: each displayed value and each array the example named."""
    return {k: v for k, v in namespace.items()
            if k.startswith(OUT) or (not k.startswith("_") and is_array(v))}


# --- one worker ---------------------------------------------------------------------------
class Runner:
    """A real IPython shell with the extension loaded, and NumPy's reference runs."""

    def __init__(self) -> None:
        import warnings

        import numpy
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        warnings.simplefilter("ignore")
        config = Config()
        config.HistoryManager.enabled = False
        self.np = numpy
        self.ip = InteractiveShell.instance(config=config)
        self.ip.run_line_magic("load_ext", "cupy_magic")
        self.keep = set(self.ip.user_ns)
        self.conn: Any = None  # told as each run ends (the parent times each run)

    def reference(self, source: str) -> dict[str, Any]:
        namespace: dict[str, Any] = {"np": self.np}
        exec(compile(source, "<numpy example>", "exec"), namespace)
        return compared(namespace)

    def cell(self, source: str, fallback: bool) -> tuple[dict[str, Any], BaseException | None]:
        ip = self.ip
        ip.user_ns["np"] = self.np
        flags = "--to-host --fallback" if fallback else "--to-host"
        result = ip.run_cell(f"%%gpu {flags}\n{source}", store_history=False, silent=True)
        error = result.error_in_exec or result.error_before_exec
        values = {k: to_host(v) for k, v in compared(ip.user_ns).items() if k not in self.keep}
        for name in set(ip.user_ns) - self.keep:
            del ip.user_ns[name]
        return values, error

    def run(self, example: dict[str, Any]) -> dict[str, Any]:
        np = self.np
        options, errs = np.get_printoptions(), np.geterr()
        out: dict[str, Any] = {"function": example["function"], "loose": example["loose"],
                               "statements": example["statements"],
                               "dropped": example["dropped"]}
        try:
            try:
                ref = self.reference(example["source"])
            except Exception as exc:  # NumPy's own run fails: the example is not counted
                out["skipped"] = f"fails under NumPy here: {type(exc).__name__}: {_first(exc)}"
                return out
            out["arrays"] = any(is_array(v) for v in ref.values())
            if self.conn is not None:
                self.conn.send(("reference", out["arrays"]))
            for mode, fallback in (("default", False), ("fallback", True)):
                np.set_printoptions(**options)
                np.seterr(**errs)
                values, error = self.cell(example["source"], fallback)
                out[mode] = verdict(ref, values, error, bool(example["loose"]))
                if fallback and error is None:
                    from cupy_magic import last_report

                    report = last_report()
                    out[mode]["fell_back"] = sorted({r.function for r in report.fallbacks})
                if self.conn is not None:
                    self.conn.send((mode, out[mode]))
        finally:
            np.set_printoptions(**options)
            np.seterr(**errs)
        return out


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def verdict(ref: dict[str, Any], values: dict[str, Any], error: BaseException | None,
            loose: bool) -> dict[str, Any]:
    """Pass, or the failure's cause class, whether it was named in one line, and the text."""
    from cupy_magic.compat.advice import CupyLimit

    if error is not None:
        if isinstance(error, CupyLimit):
            return {"ok": False, "cause": CAUSES.get(error.kind, "other"), "named": True,
                    "kind": error.kind, "function": error.function,
                    "one_line": "\n" not in str(error), "message": str(error)[:400]}
        return {"ok": False, "cause": "other", "named": False,
                "kind": type(error).__name__, "function": "",
                "message": f"{type(error).__name__}: {_first(error)}"}
    for name, value in ref.items():
        why = differs(value, values[name], loose) if name in values else "not assigned"
        if why:
            return {"ok": False, "cause": "other", "named": False, "kind": "different result",
                    "function": "", "message": f"{name}: {why}"}
    return {"ok": True}


def worker(conn: Any, workdir: str) -> None:
    """Run the examples ``conn`` sends (in ``workdir``: some examples write files)."""
    import contextlib
    import io

    os.chdir(workdir)
    runner = Runner()
    runner.conn = conn
    conn.send("ready")
    while True:
        example = conn.recv()
        if example is None:
            return
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = runner.run(example)
        conn.send(result)


# --- the run --------------------------------------------------------------------------------
def run_all(examples: list[dict[str, Any]], workers: int, timeout: float,
            budget: float) -> list[dict[str, Any]]:
    """Each example in a worker process; a timed-out worker is replaced."""
    ctx = mp.get_context("spawn")
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(examples)):
        todo.put(i)
    results: list[dict[str, Any] | None] = [None] * len(examples)
    deadline = time.monotonic() + budget
    workdir = tempfile.mkdtemp(prefix="numpy-examples-")

    def start() -> tuple[Any, Any]:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(child, workdir), daemon=True)
        proc.start()
        if not parent.poll(120) or parent.recv() != "ready":
            raise RuntimeError("a worker did not start within 120 s")
        return proc, parent

    def drive() -> None:
        proc, conn = start()
        while time.monotonic() < deadline:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                break
            conn.send(examples[i])
            done: dict[str, Any] = {}
            try:
                while conn.poll(timeout):  # each run (NumPy, default, fallback) gets `timeout`
                    message = conn.recv()
                    if isinstance(message, dict):
                        results[i] = message
                        break
                    done[message[0]] = message[1]
            except EOFError:  # the worker died (a crash in the example): a fresh one
                done["died"] = True
            if results[i] is not None:
                continue
            proc.kill()
            proc.join()
            results[i] = timed_out(examples[i], timeout, done)
            proc, conn = start()
        conn.send(None)
        proc.join(10)

    threads = [threading.Thread(target=drive) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r if r is not None else {"function": examples[i]["function"],
                                     "skipped": "not run: over the --budget"}
            for i, r in enumerate(results)]


def timed_out(example: dict[str, Any], timeout: float, done: dict[str, Any]
              ) -> dict[str, Any]:
    """The record of an example stopped at the timeout in the run after ``done`` (in NumPy's
    own run: not counted; in the default run: the fallback run is not reached either)."""
    out: dict[str, Any] = {k: example[k] for k in ("function", "loose", "statements",
                                                    "dropped")}
    if "reference" not in done:
        why = "died" if done.get("died") else f"over the {timeout:g} s timeout"
        return {**out, "skipped": f"NumPy's own run {why}"}
    stopped = {"ok": False, "cause": "other", "named": False, "kind": "timeout",
               "function": "", "message": f"over {timeout:g} s"}
    if done.get("died"):
        stopped = {**stopped, "kind": "worker died", "message": "the worker process died"}
    out["arrays"] = done["reference"]
    out["default"] = done.get("default", stopped)
    out["fallback"] = stopped
    return out


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass rates over the array-computing examples, and the failures by cause and function."""
    counted = [r for r in results if "skipped" not in r and r.get("arrays")]
    summary: dict[str, Any] = {
        "examples": len(results), "counted": len(counted),
        "not_arrays": sum(1 for r in results if "skipped" not in r and not r.get("arrays")),
        "skipped": collections.Counter(r["skipped"].split(":")[0] for r in results
                                       if "skipped" in r)}
    for mode in ("default", "fallback"):
        failed = [r for r in counted if not r[mode]["ok"]]
        summary[f"pass_rate_{mode}"] = round(1 - len(failed) / len(counted), 4) if counted else None
        summary[f"named_{mode}"] = sum(1 for r in failed if r[mode]["named"])
        summary[f"causes_{mode}"] = dict(collections.Counter(
            f"{r[mode]['cause']} ({r[mode]['kind']})" for r in failed).most_common())
        summary[f"failures_{mode}"] = [
            {"example": r["function"], "cause": r[mode]["cause"], "named": r[mode]["named"],
             "function": r[mode]["function"], "message": r[mode]["message"]} for r in failed]
    summary["fell_back"] = dict(collections.Counter(
        f for r in counted if r["fallback"]["ok"] for f in r["fallback"].get("fell_back", ())
    ).most_common())
    summary["skipped"] = dict(summary["skipped"])
    return summary


def markdown(meta: dict[str, Any], s: dict[str, Any]) -> str:
    """The summary as a short Markdown page."""
    rate = lambda v: "n/a" if v is None else f"{v:.2%}"  # noqa: E731
    out = [f"# NumPy's docstring examples under `%%gpu --to-host` ({meta['label']})", "",
           f"{meta['device']}; NumPy {meta['numpy']}, CuPy {meta['cupy']}, "
           f"{meta['when']}, {meta['seconds']:.0f} s.", "",
           f"{s['examples']} examples; {s['counted']} compute arrays and are counted; "
           f"{s['not_arrays']} compute none; skipped: {s['skipped'] or 'none'}.", "",
           "| mode | pass rate | passing | target | met | failures | named in one line |",
           "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for mode in ("default", "fallback"):
        failures, target = len(s[f"failures_{mode}"]), TARGETS[f"pass_rate_{mode}"]
        passing = s["counted"] - failures
        met = "yes" if passing >= target * s["counted"] else "no"
        out.append(f"| {mode} | {rate(s[f'pass_rate_{mode}'])} | {passing} of {s['counted']} | "
                   f"{target:.0%} | {met} | {failures} | {s[f'named_{mode}']} |")
    for mode in ("default", "fallback"):
        out += ["", f"## Failures, {mode}", "", "| example | cause | named | message |",
                "| --- | --- | --- | --- |"]
        out += [f"| {f['example']} | {f['cause']} | {'yes' if f['named'] else 'no'} | "
                f"{f['message'][:160].replace('|', '/')} |" for f in s[f"failures_{mode}"]]
    if s["fell_back"]:
        out += ["", "## Functions run with NumPy under --fallback (examples passing)", ""]
        out += [f"- `{k}`: {v}" for k, v in s["fell_back"].items()]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per example")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the run")
    parser.add_argument("--only", default="", help="a regular expression over function names")
    args = parser.parse_args()
    import cupy
    import numpy

    from cupy_magic import backend as _backend

    be = _backend.current()
    where = "gpu" if be.is_gpu else "host"
    examples = [e for e in collect() if re.search(args.only, e["function"])]
    t0 = time.perf_counter()
    results = run_all(examples, args.workers, args.timeout, args.budget)
    seconds = time.perf_counter() - t0
    summary = summarise(results)
    when = stamp()
    meta = {"benchmark": "numpy_examples", "backend": where, "device": be.info().name,
            "label": "GPU" if be.is_gpu else "CPU fallback (NumPy runs the cells)",
            "numpy": numpy.__version__, "cupy": cupy.__version__,
            "python": python(), "when": when, "seconds": seconds,
            "workers": args.workers, "timeout_s": args.timeout, "budget_s": args.budget,
            "only": args.only, "targets": TARGETS, "cells": "IPython InteractiveShell.run_cell "
            "with the extension loaded: %%gpu --to-host, and --to-host --fallback"}
    print(f"NumPy docstring examples on {meta['device']} [{meta['label']}], {seconds:.0f} s")
    print(f"  {summary['counted']} of {summary['examples']} examples compute arrays")
    for mode in ("default", "fallback"):
        failed = summary[f"failures_{mode}"]
        print(f"  {mode:<8} pass rate {summary[f'pass_rate_{mode}']:.2%} (target "
              f"{TARGETS[f'pass_rate_{mode}']:.0%}); {len(failed)} failures, "
              f"{summary[f'named_{mode}']} named in one line: {summary[f'causes_{mode}']}")
    write(RESULTS, f"numpy-examples-{when}-{where}",
          {**meta, **{k: v for k, v in summary.items()}, "results": results},
          markdown(meta, summary))


if __name__ == "__main__":
    main()

"""A differential harness: one cell run as a plain cell and as a ``%%gpu --quiet`` cell in one
real Jupyter kernel (CPU fallback), and what the notebook shows and keeps of each.

Each run starts from a fresh namespace (``%reset -f``, NumPy's print and error settings put
back, ``x`` a 4-element float array, then the row's setup cell), runs the cell, then a plain
probe cell that prints the user's names and the row's expressions. :func:`notebook_view`
collects, per cell, what a notebook renders and stores: the stream text (consecutive pieces
joined), the display and result bundles, the error's name, value, notes and line, the reply's
status, payloads (``x?``'s pager) and the execution counts (relative to the first cell); of
an error, also each frame's function and arguments as the traceback names them (``f(a)``).
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from host_kernel import host_kernel_env
from IPython.core.inputtransformer2 import TransformerManager
from jupyter_client.manager import start_new_kernel

import cupy_magic

__all__ = ["GPU", "Row", "as_plain", "diff_kernel", "execute", "notebook_view", "probe_cell"]

GPU = "%%gpu --quiet\n"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The settings every run starts from: NumPy's are the process's, not the namespace's.
RESET = ("%reset -f\nimport numpy as np\n"
         "np.set_printoptions(edgeitems=3, infstr='inf', linewidth=75, nanstr='nan', "
         "precision=8, suppress=False, threshold=1000, formatter=None, sign='-', "
         "floatmode='maxprec', legacy=False)\n"
         "np.seterr(all='warn', under='ignore')\n"
         "x = np.array([1.0, 2.0, 3.0, 4.0])")
HIDDEN = "{'In', 'Out', 'exit', 'quit', 'get_ipython', 'open'}"


@dataclass(frozen=True)
class Row:
    """One snippet of the table.

    Attributes
    ----------
    id
        The test's id.
    body
        The cell, run plain and under ``%%gpu --quiet``.
    setup
        A plain cell run before it (after the reset).
    probes
        Expressions a plain cell after it prints (``type`` and ``repr``); ``{n}`` is the
        cell's execution count.
    masks, why
        Patterns written as ``...`` in both views, and why that part must differ (a time, a
        file's hash); by default nothing is masked.
    frames
        Compare every frame an error's traceback names (by default its innermost one only:
        ``test_parity_diff``'s ``traceback_frames`` row says why).
    marks
        ``pytest.param`` marks (an ``xfail`` with its reason).
    """

    id: str
    body: str
    setup: str = ""
    probes: tuple[str, ...] = ()
    masks: tuple[str, ...] = ()
    why: str = ""
    frames: bool = False
    marks: tuple[Any, ...] = field(default=())

    def __post_init__(self) -> None:
        assert not self.masks or self.why, f"row {self.id}: say why its masks must differ"


@pytest.fixture(scope="module")
def diff_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One python3 kernel on the host backend for the module, with this checkout's package
    (``PYTHONPATH``: the installed one may be another worktree's) and ``%load_ext`` done."""
    home = tmp_path_factory.mktemp("diffkernel")
    root = str(Path(cupy_magic.__file__).resolve().parent.parent)
    km, kc = start_new_kernel(kernel_name="python3", env=host_kernel_env(home), cwd=str(home))
    try:
        where = execute(kc, "%load_ext cupy_magic\nimport cupy_magic\n"
                        "print(cupy_magic.__file__)")
        assert where["status"] == "ok" and root in where["stdout"], where
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute(kc: Any, code: str, timeout: float = 60) -> dict[str, Any]:
    """Run ``code``; its reply's status and count, and its iopub messages' contents."""
    msg_id = kc.execute(code, allow_stdin=False)
    got: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    while True:
        if time.monotonic() > deadline:
            raise AssertionError(f"the cell did not finish in {timeout} s: {code!r}")
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        got.append((kind, content))
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    content = reply["content"]
    stdout = "".join(c.get("text", "") for k, c in got if k == "stream" and c["name"] == "stdout")
    return {"status": content["status"], "count": content.get("execution_count"),
            "payload": [p.get("data", {}).get("text/plain", p.get("source", ""))
                        for p in content.get("payload", [])],
            "messages": got, "stdout": stdout}


def _shown(kind: str, content: dict[str, Any], base: int, ids: dict[str, int],
           frames: bool) -> Any:
    """What the notebook keeps of one iopub message (``None``: nothing it shows)."""
    if kind == "stream":
        return ["stream", content["name"], content["text"]]
    if kind in ("display_data", "update_display_data", "execute_result"):
        shown = ["display" if kind == "display_data" else kind, content["data"],
                 content.get("metadata", {})]
        key = content.get("transient", {}).get("display_id")
        if key is not None:  # a fresh uuid per display: its order of first appearance
            shown.append(f"display id {ids.setdefault(key, len(ids))}")
        if kind == "execute_result":
            shown.append(f"count +{content['execution_count'] - base}")
        return shown
    if kind == "error":
        lines = ANSI.sub("", "\n".join(content["traceback"])).splitlines()
        where = [f"In[+{int(m[1]) - base}] line {m[2]}"
                 for m in re.finditer(r"Cell In\[(\d+)\], line (\d+)", "\n".join(lines))]
        head = f"{content['ename']}: {content['evalue']}" if content["evalue"] \
            else content["ename"]
        tail = lines[next((i for i in range(len(lines) - 1, -1, -1)
                           if lines[i].startswith(content["ename"])), len(lines)):]
        calls = re.findall(r", in (\S+\(.*\))$", "\n".join(lines), re.MULTILINE)
        return ["error", content["ename"], content["evalue"], where if frames else where[-1:],
                tail if tail and tail[0].startswith(head) else lines[-3:], calls]
    if kind == "clear_output":
        return ["clear_output", content.get("wait")]
    return None


def _joined(shown: list[Any]) -> list[Any]:
    """Consecutive pieces of one stream as one text, as the notebook renders them. Between
    two other outputs, stdout's and stderr's texts come each as one, stdout's first: the
    kernel flushes the two streams apart, so which arrives first differs from run to run
    of the same plain cell (``print('c', file=sys.stderr); print('d')`` showed d before c
    once in a CI run, 2026-12-07)."""
    out: list[Any] = []
    for item in shown:
        if item[0] != "stream" or not out or out[-1][0] != "stream":
            out.append(item)
            continue
        streams = {}
        while out and out[-1][0] == "stream":
            _, name, text = out.pop()
            streams[name] = text + streams.get(name, "")
        streams[item[1]] = streams.get(item[1], "") + item[2]
        out += [["stream", name, streams[name]] for name in sorted(streams, key="stdout".__ne__)]
    return out


def _view(ran: dict[str, Any], base: int, ids: dict[str, int], row: Row) -> dict[str, Any]:
    shown = [s for k, c in ran["messages"]
             if (s := _shown(k, c, base, ids, row.frames)) is not None]
    view = {"status": ran["status"], "count": f"+{ran['count'] - base}",
            "payload": ran["payload"], "shown": _joined(shown)}
    return _mapped(view, lambda text: _masked(text, row.masks))


def _masked(text: str, masks: tuple[str, ...]) -> str:
    for mask in masks:
        text = re.sub(mask, "...", text)
    return text


def _mapped(item: Any, change: Callable[[str], str]) -> Any:
    """``item`` with every string in it (lists and dicts walked) passed through ``change``."""
    if isinstance(item, str):
        return change(item)
    if isinstance(item, list):
        return [_mapped(i, change) for i in item]
    if isinstance(item, dict):
        return {k: _mapped(v, change) for k, v in item.items()}
    return item


def probe_cell(probes: tuple[str, ...], number: int) -> str:
    """A plain cell printing the user's names, then each probe's type and repr."""
    lines = [f"print('names ->', sorted(n for n in globals() if not n.startswith('_') "
             f"and n not in {HIDDEN}))"]
    for probe in probes:
        expr = probe.replace("{n}", str(number))
        lines += ["try:", f"    __v = ({expr})",
                  f"    print({probe!r}, '->', type(__v).__name__, repr(__v))",
                  "except BaseException as __e:",
                  f"    print({probe!r}, '-> raises', type(__e).__name__, __e)"]
    return "\n".join(lines)


def notebook_view(kc: Any, row: Row, gpu: bool) -> dict[str, Any]:
    """The notebook's view of ``row`` run plain (``gpu=False``) or as a ``%%gpu`` cell."""
    # IPython warns "To exit: use 'exit'" once (until any module changes the warning
    # filters): shown here, so that neither of a row's runs shows it for the other
    execute(kc, "raise SystemExit")
    reset = execute(kc, RESET)
    assert reset["status"] == "ok", reset
    base, ids = reset["count"], {}
    view: dict[str, Any] = {}
    if row.setup:
        view["setup"] = _view(execute(kc, row.setup), base, ids, row)
    ran = execute(kc, (GPU if gpu else "") + row.body)
    view["cell"] = _view(ran, base, ids, row)
    view["probe"] = _view(execute(kc, probe_cell(row.probes, ran["count"])), base, ids, row)
    return view


def as_plain(view: dict[str, Any], row: Row) -> dict[str, Any]:
    """A ``%%gpu`` cell's view with what must differ written as the plain cell's: the cell's
    input as IPython keeps it (``_i``: the raw text, ``In[n]``: the text IPython ran), which
    has the magic's line; nothing else."""
    cells = TransformerManager()
    swaps = []
    for gpu, plain in ((GPU + row.body, row.body),
                       (cells.transform_cell(GPU + row.body).rstrip("\n"),
                        cells.transform_cell(row.body).rstrip("\n"))):
        swaps += [(repr(gpu), repr(plain)), (gpu, plain)]

    def swap(text: str) -> str:
        for old, new in swaps:
            text = text.replace(old, new)
        return text

    return _mapped(view, swap)

"""A ``%%gpu`` cell shows the expression statements a plain cell shows under the shell's
``ast_node_interactivity`` (``all``, ``last_expr_or_assign``, ``last``, ``none``), with the
same ``Out``, ``_`` and ``_N``; through a real IPython shell, on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic

BODIES = ["1\nprint('p')\n2\nq = 3", "a = 1\nb = 2", "for i in range(2):\n    i",
          "1\n2;", "x9 = 4\nx9", "print('only')"]


def _seen(ip, capsys, text: str) -> tuple:
    """What a cell printed and showed, and the output names it left."""
    ip.user_ns.pop("_", None)
    result = ip.run_cell(text, store_history=True)
    n = result.execution_count
    shown = capsys.readouterr().out.replace(f"Out[{n}]", "Out[n]")
    return (result.success, shown, result.result, ip.user_ns.get("_"),
            ip.user_ns["Out"].get(n), ip.user_ns.get(f"_{n}", "no _N"))


@pytest.mark.parametrize("mode", ["all", "last_expr_or_assign", "last", "none"])
@pytest.mark.parametrize("body", BODIES)
def test_a_gpu_cell_shows_what_a_plain_cell_shows_in_every_interactivity(ip, capsys,
                                                                         monkeypatch, mode,
                                                                         body):
    monkeypatch.setattr(ip, "ast_node_interactivity", mode)
    plain = _seen(ip, capsys, body)
    gpu = _seen(ip, capsys, "%%gpu --quiet\n" + body)
    assert gpu == plain
    # the output names are IPython's, not results of the cell
    assert not [o.name for o in cupy_magic.last_report().outputs if o.name.startswith("_")]


@pytest.mark.gpu
def test_a_device_array_shown_under_all_is_no_host_sync_of_the_cell(gip, capsys, monkeypatch):
    """A plain cell shows the array; reading it for the display is not the cell's sync, so
    ``--syncs error`` does not stop the cell there and the report counts none."""
    monkeypatch.setattr(gip, "ast_node_interactivity", "all")
    gip.user_ns["x"] = np.arange(3.0)
    result = gip.run_cell("%%gpu --quiet --syncs error\ny = x + 1\ny\nz = y * 2",
                          store_history=True)
    assert result.success, result.error_in_exec
    assert "array([1., 2., 3.])" in capsys.readouterr().out  # y = arange(3.0) + 1
    assert cupy_magic.last_report().syncs == []


def test_under_all_the_shown_values_keep_their_output_names_after_the_commit(ip, capsys,
                                                                            monkeypatch):
    """IPython's displayhook writes ``_`` and ``_N`` into the user namespace while the cell
    runs; the commit of the cell's own names keeps them, and the arrays it assigned too."""
    monkeypatch.setattr(ip, "ast_node_interactivity", "all")
    ip.user_ns["x"] = np.arange(3.0)
    for name in ("_", "__", "___"):  # IPython updates none of them if one is not its own
        ip.user_ns.pop(name, None)
    result = ip.run_cell("%%gpu --quiet --to-host\ny = x + 1\nint(y.sum())\n'last'",
                         store_history=True)
    n = result.execution_count
    assert result.success and result.result == "last"
    assert ip.user_ns["_"] == "last" and ip.user_ns["__"] == 6 and ip.user_ns[f"_{n}"] == "last"
    assert capsys.readouterr().out.count(f"Out[{n}]") == 2
    assert isinstance(ip.user_ns["y"], np.ndarray)
    assert [o.name for o in cupy_magic.last_report().outputs] == ["y"]


def test_a_silent_cell_shows_nothing_in_any_interactivity(ip, capsys, monkeypatch):
    monkeypatch.setattr(ip, "ast_node_interactivity", "all")
    result = ip.run_cell("%%gpu --quiet\n1\n2", silent=True)
    assert result.success and result.result is None
    assert capsys.readouterr().out == ""


def test_a_batched_cell_under_all_says_its_values_are_not_shown(ip, capsys, monkeypatch):
    monkeypatch.setattr(ip, "ast_node_interactivity", "all")
    ip.user_ns["x"] = np.arange(8.0)
    result = ip.run_cell("%%gpu --quiet --batch --batch-rows 4\ny = x * 2\ny.sum()\n",
                         store_history=True)
    assert result.success and result.result is None
    assert f"Out[{result.execution_count}]" not in capsys.readouterr().out
    assert any("last expression" in n for n in cupy_magic.last_report().notes)


@pytest.mark.gpu
@pytest.mark.parametrize("line", ["--to-host y", "--to-host"])
def test_under_all_a_value_shown_mid_cell_is_kept_as_the_host_array_its_name_became(
        gip, capsys, monkeypatch, line):
    """A plain NumPy cell's ``Out[n]``, ``_`` and ``_n`` are the array ``y`` holds; under
    ``--to-host`` the ``%%gpu`` cell's are the host array ``y`` became, not the device array
    shown mid-cell (whose text is the same). Needs the GPU: on the CPU fallback the array
    the cell shows and the one it commits are one NumPy array. ``y += 1`` after it is shown:
    the one array holds the cell's last values, as a plain cell's does."""
    monkeypatch.setattr(gip, "ast_node_interactivity", "all")
    gip.user_ns["x"] = np.arange(3.0)
    result = gip.run_cell(f"%%gpu --quiet {line}\ny = x + 1\ny\ny += 1\nx * 0\nz = 2",
                          store_history=True)
    assert result.success, result.error_in_exec
    n, ns = result.execution_count, gip.user_ns
    assert "array([1., 2., 3.])" in capsys.readouterr().out
    y = ns["y"]
    assert type(y) is np.ndarray and ns["__"] is y and y.tolist() == [2.0, 3.0, 4.0]
    unnamed = ns["_"]  # x * 0, bound to no name: on the host under --to-host alone
    assert (type(unnamed) is np.ndarray) == (line == "--to-host")
    assert ns["Out"][n] is unnamed and ns[f"_{n}"] is unnamed


@pytest.mark.parametrize("body", ["a += 1\na", "m = f.mean()\nm", "f.sum()\n0",
                                  "a += 1\nm = a * 2\nm"])
def test_under_all_a_0d_value_brought_to_the_host_shows_as_in_a_plain_cell(ip, capsys,
                                                                          monkeypatch, body):
    """A number a cell shows mid-cell under ``--to-host`` is what a plain cell shows: NumPy's
    scalar for a reduction (``np.float64(5.5)``), a 0-d array for the 0-d array the user had
    (``a += 1`` keeps ``array(3.)``), and the name holds what was shown."""
    monkeypatch.setattr(ip, "ast_node_interactivity", "all")
    ip.user_ns.update(f=np.arange(12.0).reshape(4, 3), a=np.array(2.0))
    plain = _seen(ip, capsys, body)
    held = {k: ip.user_ns.get(k) for k in ("a", "m")}
    ip.user_ns.update(f=np.arange(12.0).reshape(4, 3), a=np.array(2.0))
    ip.user_ns.pop("m", None)
    gpu = _seen(ip, capsys, "%%gpu --quiet --to-host\n" + body)
    assert gpu[:2] == plain[:2]  # success, what was shown
    for k, v in held.items():
        got = ip.user_ns.get(k)
        assert type(got) is type(v) and (v is None or got == v), k

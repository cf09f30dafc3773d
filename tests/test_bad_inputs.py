"""Bad and odd input to every magic, as one table: each answer is a one-line UsageError that
names the value given and says the fix (issue 17, point 7). Good input stays accepted."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest
from IPython.core.error import UsageError

from cupy_magic.magics import syntax_message
from cupy_magic.monitor.sampler import MAX_INTERVAL, MIN_INTERVAL
from cupy_magic.run.batching import MAX_STREAMS

CELL = "y = x + 1\n"
# After the last "; " a message says what to do: an example, a command or an instruction.
FIX = re.compile(r"; .*(e\.g\.|\buse\b|\btry\b|\bwrite\b|\bgive\b|\bkeep\b|%)")


def case(magic: str, line: str, value: str, fragment: str = "", cell: str = CELL):
    """One row: ``%magic line`` (over ``cell`` for %%gpu) names ``value`` and ``fragment``."""
    return pytest.param(magic, line, cell, value, fragment, id=f"{magic} {line}"[:60])


BAD_INPUTS = [
    # --streams: bounded, whole, given once
    case("gpu", "--streams 100000000", "100000000", f"at most {MAX_STREAMS}"),
    case("gpu", "--streams 99999999999999999999999999", "99999999999999999999999999",
         "batch in flight"),
    case("gpu", "--streams 10**23", "10**23", "whole number"),
    case("gpu", "--streams 0", "0", "at least 1"),
    case("gpu", "--streams", "--streams", "needs a value (got none)"),
    # an option given twice would silently keep the last
    case("gpu", "--dtype float32 --dtype float16", "--dtype float16", "twice"),
    case("gpu", "--streams 2 --streams 3", "--streams 3", "twice"),
    case("gpu", "--streams=2 --stream 3", "--streams 3", "twice"),
    case("gpu", "--to-host y --to-host z", "--to-host z", "twice"),
    case("gpu", "--batch-rows 5 --batch-rows 6", "--batch-rows 6", "twice"),
    case("gpu", "--batch x --batch y", "--batch y", "twice"),
    case("gpu", "--syncs warn --syncs off", "--syncs off", "twice"),
    case("gpu", "--syncs warn --syncs warn", "--syncs warn", "twice"),
    case("gpu", "--reduce total=sum --reduce total=max", "max", "two rules",
         cell="total = x.sum()\n"),
    # what argparse says, with the magic, the value and a fix
    case("gpu", "--foo", "--foo", "%%gpu has no option"),
    case("gpu", "--bogus", "--bogus", "%%gpu? lists the options"),
    case("gpu", "--to-hst y", "--to-hst", "did you mean --to-host?"),
    # IPython's magics take no --help: the pointer is to their help, not a near option
    case("gpu", "--help", "--help", "its help is %%gpu? (the options"),
    case("gpu", "-h", "-h", "its help is %%gpu?"),
    case("vram_budget", "--help", "--help", "its help is %vram_budget?"),
    case("gpu", "-q", "-q", "did you mean --quiet?"),
    case("gpu", "extra words", "extra words", "options only"),
    case("gpu", "y = x + 1", "y = x + 1", "lines below the %%gpu line"),
    case("gpu", "--dtype", "--dtype", "e.g. %%gpu --dtype float32"),
    case("gpu", "--batch-bytes -1MB", "-1MB", "cannot be negative"),
    case("gpu", "--bat 3", "--bat", "could mean --batch"),
    case("gpu", "--quiet=yes", "yes", "takes no value"),
    case("gpu", '--to-host "y', '"y', "no closing quotation"),
    # a word after an option: a value split by a space, or a value for a flag
    case("gpu", "--batch-bytes 2 GB", "'GB'", "without a space: %%gpu --batch-bytes 2GB"),
    case("gpu", "--batch-bytes=2 GB", "'GB'", "without a space: %%gpu --batch-bytes 2GB"),
    case("gpu", "--to-host y z", "'z'", "commas only: %%gpu --to-host y,z"),
    case("gpu", "--streams 2 3", "'3'", "takes one value"),
    case("gpu", "--fallback off", "--fallback off", "use %gpu_fallback off"),
    case("gpu", "--warmup yes", "--warmup yes", "takes no value"),
    # values the options themselves refuse
    case("gpu", "--dtype int8", "int8", "--dtype float32"),
    case("gpu", "--to-host 1bad", "1bad", "--to-host y,total"),
    pytest.param("gpu", "--to-host nope", CELL, "nope", "which the cell never assigns",
                 id="gpu --to-host nope"),
    case("gpu", "--syncs loud", "loud", "--syncs warn"),
    case("gpu", "--batch-rows 0", "0", "at least 1"),
    case("gpu", "--batch-bytes 5e-1", "5e-1", "fraction of a byte"),
    case("gpu", "--batch-bytes 0", "0", "--batch-bytes 512MB"),
    case("gpu", "--reduce total=median", "median", "--reduce total=sum"),
    # --devices: visible device numbers or all, on a batched run in this kernel
    case("gpu", "--devices x", "'x'", "takes device numbers or all"),
    case("gpu", "--devices 0,7", "0,7", "device 7 is not visible"),
    case("gpu", "--devices 0,0", "0,0", "names device 0 twice"),
    case("gpu", "--devices", "--devices", "needs a value"),
    case("gpu", "--devices 0 --cluster", "--devices 0", "and --cluster both"),
    case("gpu", "--devices all --lines", "--devices all", "--lines is not available"),
    case("gpu", "--devices 0 --batch --timeline", "--devices 0", "--timeline is not available"),
    case("gpu", "--devices 0", "--devices 0", "reads none with rows", cell="y = 1\n"),
    case("vram_budget", "8GB --device 3", "--device 3", "not a visible device"),
    case("vram_budget", "8GB --device one", "'one'", "takes a device number"),
    case("vram_budget", "--estimate 10x10 --device 0", "--device 0", "not both"),
    # a bare number is a fraction of the device whatever its notation; a size needs a unit
    case("vram_budget", "1e9", "1e9", "fraction of the device, 0 to 1"),
    case("vram_budget", "1000000000", "1000000000", "e.g. 1000000000B"),
    case("vram_budget", "12", "12", "e.g. 12GB"),
    case("vram_budget", "2000", "2000", "e.g. 2000MB"),  # not 2000GB, more than the device
    case("vram_budget", "none", "none", "'off'"),  # the word that removes a budget
    case("vram_budget", "0", "0", "'off'"),
    case("vram_budget", "1e-20", "1e-20", "less than one byte"),
    case("vram_budget", "8GB --estimate 10x10", "8GB", "not both"),
    case("vram_budget", "--foo", "--foo", "%vram_budget has no option"),
    case("vram_budget", "off 8GB", "off 8GB", "e.g. 8GB"),
    # --estimate: a power is not a shape, and nothing the GPU cannot hold is priced
    case("vram_budget", "--estimate 2**10", "2**10", "as 1024"),
    case("vram_budget", "--estimate 10**9 float32", "10**9", "as 1000000000"),
    case("vram_budget", "--estimate 2**10x2**10", "2**10x2**10", "e.g. 1024x1024"),
    case("vram_budget", "--estimate 10x10 datetime64", "datetime64", "CuPy has no datetime64"),
    case("vram_budget", "--estimate when", "when", "CuPy has no datetime64"),
    case("vram_budget", "--estimate 10x10 m8[s]", "m8[s]", "timedelta64"),
    case("vram_budget", "--estimate 10x10 longdouble", "longdouble", "no extended precision"),
    case("vram_budget", "--estimate 1.5e0x2", "1.5e0x2", "whole numbers"),
    case("vram_budget", "--estimate 1e30x1e30", "1e30x1e30", "more elements"),
    case("vram_budget", "--estimate 10x10 --estimate 3x3", "--estimate 3x3", "twice"),
    case("vram_budget", "--estimate", "--estimate", "needs a value"),
    # a variable in a dtype: its shape in that dtype (x float32 read "cannot read the shape")
    case("vram_budget", "--estimate x float33", "float33", "unknown dtype"),
    # --interval: the panel samples every 0.05 to 3600 s
    case("vram_panel", "--interval 1e308", "1e308", "0.05 to 3600 seconds"),
    case("vram_panel", "--interval 1e-9", "1e-9", "spins a core"),
    case("vram_panel", "--interval nan", "nan", "0.05 to 3600 seconds"),
    case("vram_panel", "--interval abc", "abc", "--interval 0.5"),
    case("vram_panel", "--interval 1 --interval 2", "--interval 2", "twice"),
    case("vram_panel", "--interval=1 --inter 2", "--interval 1", "twice"),
    case("vram_panel", "x", "x", "whole number"),
    case("vram_panel", "0 1", "1", "%vram_panel? lists the options"),
    case("vram_panel", "--pause --stop", "--stop", "give one of"),
    # --pause, --resume and --stop act on every panel: what they would ignore is refused
    case("vram_panel", "0 --stop", "%vram_panel 0 --stop", "takes no device"),
    case("vram_panel", "--interval 2 --pause", "--interval 2 --pause", "takes no --interval"),
    case("vram_panel", "--resume --text", "--resume --text", "takes no --text"),
    case("vram_panel", "--foo", "--foo", "has no option"),
    case("gpu_syncs", "warn off", "off", "e.g. %gpu_syncs warn"),
    case("gpu_syncs", "loud", "loud", "%gpu_syncs warn"),
    case("gpu_backend", "host cupy", "cupy", "e.g. %gpu_backend host"),
    case("gpu_backend", "tpu", "tpu", "%gpu_backend host"),
    case("gpu_backend", '"host', '"host', "close the quote"),
] + [case("vram_budget", value, value.strip()) for value in (
    "8XB", "-1GB", "150%", "0", "0%", "abc", "1.5", "GB", "1e3XB", "%", "-5%", "0.0",
    "8 G B", "0.5B", "inf", "nan", "50%%")]


@pytest.mark.parametrize(("magic", "line", "cell", "value", "fragment"), BAD_INPUTS)
def test_bad_input_is_a_one_line_usage_error_naming_the_value_and_the_fix(
        ip, magic, line, cell, value, fragment):
    ip.user_ns["x"] = np.arange(50.0)
    ip.user_ns["when"] = np.array(["2020-01-01"], dtype="datetime64[ns]")
    with pytest.raises(UsageError) as info:
        if magic == "gpu":
            ip.run_cell_magic(magic, line, cell)
        else:
            ip.run_line_magic(magic, line)
    msg = str(info.value)
    assert msg and "\n" not in msg
    assert value in msg
    assert fragment in msg
    assert FIX.search(msg), f"no fix in {msg!r}"
    assert "y" not in ip.user_ns and "total" not in ip.user_ns


GOOD_INPUTS = [
    ("gpu", f"--quiet --batch --streams {MAX_STREAMS}"),
    ("gpu", "--quiet --batch --stream 2"),
    ("gpu", "--quiet --syncs WARN"),
    ("gpu", "--quiet --quiet --warmup --warmup"),
    ("gpu", "--quiet --batch --reduce total=sum --reduce lo=min"),
    ("gpu", "--quiet --batch --reduce total=sum,total=sum,lo=min"),
    ("gpu", "--quiet --devices 0"),
    ("gpu", "--quiet --devices all --reduce total=sum,lo=min"),
    ("gpu", "--quiet --devices ALL --batch-rows 7"),
    ("vram_budget", "8GB --device 0"),
    ("vram_budget", "--device 0"),
    ("vram_budget", "5e-1"),
    ("vram_budget", "1e0"),
    ("vram_budget", "8GB"),
    ("vram_budget", "1e9B"),
    ("vram_budget", "--estimate 1e3x1e3 float32"),
    ("vram_budget", "--estimate 1024 f4"),
    ("vram_panel", f"--interval {MIN_INTERVAL} --text"),
    ("vram_panel", f"--interval {MAX_INTERVAL:g} --text"),
    ("vram_panel", "--text --text"),
    ("gpu_syncs", "WARN"),
]


@pytest.mark.parametrize(("magic", "line"), GOOD_INPUTS)
def test_good_and_odd_but_meaningful_input_is_accepted(ip, magic, line):
    ip.user_ns["x"] = np.arange(50.0)
    if magic == "gpu":
        reduced = "total = y.sum()\nlo = y.min()\n" if "--reduce" in line else ""
        ip.run_cell_magic(magic, line, "y = x + 1\n" + reduced)
        assert ip.user_ns["y"].shape == (50,)
    else:
        ip.run_line_magic(magic, line)
    ip.run_line_magic("vram_budget", "off")


def test_bare_numbers_are_fractions_in_every_notation(ip):
    assert ip.run_line_magic("vram_budget", "5e-1").budget.fraction == 0.5
    assert ip.run_line_magic("vram_budget", ".5").budget.fraction == 0.5
    assert ip.run_line_magic("vram_budget", "1e0").budget.fraction == 1.0
    ip.run_line_magic("vram_budget", "off")


def _syntax_error(source: str) -> SyntaxError:
    try:
        compile(ast.parse(source), "<cell>", "exec")
    except SyntaxError as exc:
        return exc
    raise AssertionError(f"{source!r} compiled")


def test_syntax_message_quotes_the_cells_line_when_python_gives_no_text():
    cell = "x = 1\n  \nreturn x\n"
    exc = _syntax_error(cell)
    assert exc.text is None
    assert syntax_message(exc, cell) == (
        "syntax error in the %%gpu cell, line 3: 'return' outside function ('return x'); "
        "fix the line and run the cell again")


def test_syntax_message_keeps_pythons_text_and_stays_one_line():
    try:
        ast.parse("keep = 2\nx = = 1\n")
    except SyntaxError as exc:
        msg = syntax_message(exc, "keep = 2\nx = = 1\n")
    assert msg.startswith("syntax error in the %%gpu cell, line 2: ")
    assert "('x = = 1')" in msg and "\n" not in msg
    long = SyntaxError("invalid\nsyntax", ("<cell>", None, None, None))
    assert syntax_message(long, "") == ("syntax error in the %%gpu cell: invalid syntax; fix "
                                        "the line and run the cell again")

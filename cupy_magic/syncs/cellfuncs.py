"""The host-sync lint's walk into the functions a cell defines (:mod:`.lint`): a call's
device arguments followed into the function's body, once per set of device parameters,
and the functions the cell never calls with device arguments read as their bodies use their
parameters."""

from __future__ import annotations

import ast

from .values import DeviceNames, Function, parameters

__all__ = ["CellFunctions"]

_MAX_CALL_DEPTH = 4


class CellFunctions(DeviceNames):
    """The linter's half that reads cell functions; :class:`~.lint._Linter` walks the
    statements (:meth:`block`) and keeps the depths."""

    returns: dict[tuple[str, frozenset[int], bool], bool]
    loop_depth: int
    call_depth: int

    def block(self, body: list[ast.stmt]) -> None:
        raise NotImplementedError

    def call_function(self, node: ast.Call, name: str) -> bool:
        """Lint a cell function's body for the device arguments of a call; return whether
        the call returns a device value."""
        func = self.functions[name]
        params = parameters(func)
        device_params = {i for i, a in enumerate(node.args) if self.is_device(a)}
        for kw in node.keywords:
            if kw.arg in params and self.is_device(kw.value):
                device_params.add(params.index(kw.arg))
        return self.lint_function(func, frozenset(device_params))

    def lint_function(self, func: Function, dev: frozenset[int]) -> bool:
        key = (func.name, dev, self.loop_depth > 0)
        if key in self.returns or self.call_depth >= _MAX_CALL_DEPTH:
            return self.returns.get(key, False)
        self.returns[key] = False  # a recursive call sees "host" until the body is read
        params = parameters(func)
        saved = (set(self.device), set(self.masks), set(self.loop_ints))
        local = set(params) | {a.arg for a in func.args.kwonlyargs}
        self.device -= local
        self.device |= {params[i] for i in dev if i < len(params)}
        self.masks -= local
        self.call_depth += 1
        self.block(func.body)
        self.returns[key] = any(
            self.is_device(n.value) for n in ast.walk(func) if isinstance(n, ast.Return)
        )
        self.call_depth -= 1
        self.device, self.masks, self.loop_ints = saved
        return self.returns[key]

    def lint_uncalled_functions(self) -> None:
        """Lint functions the cell never calls with device arguments, taking as device the
        parameters that the body uses as arrays (array attributes, array-module calls)."""
        for func in list(self.functions.values()):
            if any(name == func.name and dev for name, dev, _ in self.returns):
                continue
            self.lint_function(func, self.array_parameters(func))

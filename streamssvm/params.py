"""Declarative parameter specs: one table per configurable class, read by validation, the docs,
the command line and the tests (scikit-learn's ``_parameter_constraints`` idea).

A class lists its constructor parameters once, as :class:`Param` rows in a ``params`` class
attribute; its ``__init__`` stores each argument through :func:`set_params`, which checks it
against its row and stores it unchanged (a parameter is never rewritten later: running state
lives in underscore attributes). The CLI builds its options from the same rows
(:meth:`Param.parse` reads a command-line string), so the library's defaults and the CLI's are
one set.

>>> class Toy:
...     params = (Param("lam", None, "float", "regularization", low=0.0, low_open=True, none=True),
...               Param("replay", 1, "int", "replays per example", low=0),
...               Param("step", "fw", "choice", "step type", choices=("fw", "pairwise")))
...     def __init__(self, lam=None, replay=1, step="fw"):
...         set_params(self, locals())
>>> Toy(lam=0.1).lam
0.1
>>> Toy(lam=float("nan"))
Traceback (most recent call last):
...
ValueError: lam must be a finite number, got nan
>>> Toy(replay=-1)
Traceback (most recent call last):
...
ValueError: replay must be >= 0, got -1
>>> Toy(step="away")
Traceback (most recent call last):
...
ValueError: step must be one of ('fw', 'pairwise'), got 'away'
>>> spec(Toy, "replay").parse("3"), spec(Toy, "lam").parse("none")
(3, None)
>>> spec(Toy, "lam").describe()
'float > 0.0, or none (default: none)'
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

#: the value types a :class:`Param` knows
TYPES = ("int", "float", "bool", "choice", "str", "seed", "object")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Param:
    """One constructor parameter: its name, default, type, help text and bounds.

    ``type`` is one of :data:`TYPES`: ``"int"`` / ``"float"`` (bounded by ``low`` / ``high``,
    ``low_open`` for a strict lower bound; floats must be finite), ``"bool"``, ``"choice"``
    (one of ``choices``), ``"str"``, ``"seed"`` (None or an int >= 0), ``"object"`` (not checked
    here: the class checks it). ``none=True`` also accepts None. For an ``"int"`` / ``"float"``,
    ``choices`` lists literal values accepted besides the numbers (``t0="auto"``). ``cli=False``
    keeps a parameter out of the command line (objects, arrays, callables).
    """

    name: str
    default: object
    type: str
    help: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    none: bool = False
    choices: tuple = ()
    cli: bool = True

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"Param {self.name}: type must be one of {TYPES}, got {self.type!r}")
        if self.type == "choice" and not self.choices:
            raise ValueError(f"Param {self.name}: a choice needs choices")

    # ------------------------------------------------------------------ checking
    def check(self, value):
        """``value`` if it is valid for this parameter, else a TypeError / ValueError that
        names the parameter (the value is returned unchanged, never converted)."""
        if value is None and (self.none or self.type in ("seed", "object")):
            return value
        t = self.type
        if t in ("int", "float") and isinstance(value, str) and value in self.choices:
            return value
        if t in ("int", "float", "seed"):
            integer = t != "float"
            ok = isinstance(value, numbers.Integral if integer else numbers.Real) and not isinstance(value, bool)
            if not ok:
                kind = "an integer" if integer else "a number"
                if self.choices and t != "seed":
                    kind += f" or one of {tuple(self.choices)}"
                raise TypeError(f"{self.name} must be {kind}{' or None' if self.none else ''}, got {value!r}")
            if not integer and not math.isfinite(value):
                raise ValueError(f"{self.name} must be a finite number, got {value!r}")
            low = 0 if t == "seed" else self.low
            if low is not None and (value <= low if self.low_open else value < low):
                raise ValueError(f"{self.name} must be {'>' if self.low_open else '>='} {low}, got {value!r}")
            if self.high is not None and value > self.high:
                raise ValueError(f"{self.name} must be <= {self.high}, got {value!r}")
        elif t == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{self.name} must be True or False, got {value!r}")
        elif t == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {tuple(self.choices)}, got {value!r}")
        elif t == "str":
            if not isinstance(value, str):
                raise TypeError(f"{self.name} must be a string, got {value!r}")
        return value

    # ------------------------------------------------------------------ command line / docs
    def parse(self, text):
        """The value of a command-line string (``none`` is None where allowed), checked."""
        s = str(text).strip()
        if s.lower() in ("none", "null") and (self.none or self.type == "seed"):
            return None
        t = self.type
        if t in ("int", "float") and s in self.choices:
            return s
        try:
            if t in ("int", "seed"):
                value = int(s)
            elif t == "float":
                value = float(s)
            elif t == "bool":
                if s.lower() not in _TRUE + _FALSE:
                    raise ValueError
                value = s.lower() in _TRUE
            elif t == "choice":
                match = [c for c in self.choices if str(c) == s]
                if not match:
                    raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, got {s!r}")
                value = match[0]
            else:
                value = s
        except ValueError as e:
            if str(e).startswith(self.name):
                raise
            raise ValueError(f"{self.name}: cannot read {s!r} as {self.describe(default=False)}") from None
        return self.check(value)

    def describe(self, default=True):
        """A short human description: type, bounds, choices, default."""
        t = self.type
        if t in ("int", "float"):
            out = t
            if self.low is not None:
                out += f" {'>' if self.low_open else '>='} {self.low}"
            if self.high is not None:
                out += f"{',' if self.low is not None else ''} <= {self.high}"
            if self.choices:
                out += ", or " + ", ".join(map(str, self.choices))
        elif t == "choice":
            out = "one of " + ", ".join(map(str, self.choices))
        elif t == "seed":
            out = "int >= 0 or none"
        else:
            out = t
        if self.none and t != "seed":
            out += ", or none"
        if default:
            d = "none" if self.default is None else self.default
            out += f" (default: {d})"
        return out


def set_params(obj, values):
    """Check and store the constructor arguments of ``obj`` (its class's ``params`` rows) from
    ``values`` (the constructor's ``locals()``), unchanged."""
    for p in type(obj).params:
        setattr(obj, p.name, p.check(values[p.name]))


def spec(cls, name):
    """The :class:`Param` row of ``cls`` named ``name``."""
    for p in cls.params:
        if p.name == name:
            return p
    raise KeyError(f"{cls.__name__} has no parameter {name!r}")


def defaults(cls):
    """``{name: default}`` of a class's parameter rows."""
    return {p.name: p.default for p in cls.params}

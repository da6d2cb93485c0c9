"""The one error type for bad user input (trace, throughput table, configuration, job spec)."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input that the user must fix.

    ``str(err)`` is one line naming where the problem is, e.g.
    ``trace.trace:12: field 7 (scale_factor): expected an integer, got 'x'``.

    Attributes:
        source: file name (or ``"<request>"`` for HTTP bodies).
        line: 1-based line number, or ``None`` when not line-oriented.
        field: the offending field name (or key path), or ``None``.
        message: what is wrong.
    """

    def __init__(self, source: str, message: str, *, line: int | None = None, field: str | None = None):
        self.source = str(source)
        self.line = line
        self.field = field
        self.message = message
        where = self.source if line is None else f"{self.source}:{line}"
        what = f"field {field}: " if field else ""
        super().__init__(f"{where}: {what}{message}")

    def __reduce__(self):
        # picklable with its keyword arguments (a replay in a process pool raises it in the parent)
        return _rebuild, (self.source, self.message, self.line, self.field)


def _rebuild(source: str, message: str, line: int | None, field: str | None) -> InputError:
    return InputError(source, message, line=line, field=field)


def check_range(name: str, value: float, low: float, high: float, *, low_open: bool = False,
                owner: str = "") -> None:
    """Refuse a knob outside its bounds: ``ValueError("{owner} {name} must be in [low, high], got
    value")``, the form :mod:`configs.loader` traces to the key's line.

    ``low_open`` excludes ``low``. NaN is refused; ``inf`` only where ``high`` is ``inf``.
    ``owner`` (e.g. ``"[live]"``) prefixes the message of a section whose knobs share names.
    """
    above = value > low if low_open else value >= low
    if not (above and value <= high):
        span = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        prefix = f"{owner} " if owner else ""
        raise ValueError(f"{prefix}{name} must be in {span}, got {value}")

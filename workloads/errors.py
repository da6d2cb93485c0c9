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

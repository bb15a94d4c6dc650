"""What the engine raises about user code: a crash of the user's callable
(:class:`UserCodeError`, which restarts the instance), and the clear errors of a wrong
``emit``. Every room of the executor raises these; none of them holds state."""

from __future__ import annotations


class UserCodeError(Exception):
    """User code raised; the instance is restarted. ``where`` names the callable."""

    def __init__(self, where: str, cause: BaseException) -> None:
        super().__init__(f"{where} raised {type(cause).__name__}: {cause}")
        self.where = where
        self.cause = cause


def call_user(where: str, fn, *args):
    """``fn(*args)``, the user's ``where``; what it raises becomes a UserCodeError."""
    try:
        return fn(*args)
    except Exception as exc:
        raise UserCodeError(where, exc) from exc


def unknown_stream(comp: str, stream: str, routes) -> ValueError:
    return ValueError(f"component {comp!r}: emit on undeclared stream {stream!r}; "
                      f"it declares {sorted(routes)}")


def arity(values) -> int:
    """How many values ``values`` holds; -1 when it is no sized thing."""
    try:
        return len(values)
    except TypeError:
        return -1


def not_a_list(comp: str, stream: str, values) -> ValueError:
    return ValueError(f"component {comp!r} stream {stream!r}: emitted a "
                      f"{type(values).__name__}, whose values cannot be read by position; "
                      "emit a list of values, e.g. emit([v1])")


def wrong_arity(comp: str, stream: str, values, n: int) -> ValueError:
    n_got = arity(values)
    got = f"{n_got} values" if n_got >= 0 else f"a {type(values).__name__}"
    return ValueError(f"component {comp!r} stream {stream!r}: emitted {got} but the stream "
                      f"declares {n} field(s); emit a list of values, e.g. emit([v1, v2])")

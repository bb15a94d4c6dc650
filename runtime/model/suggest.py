"""The "did you mean" hint of error messages that name an unknown id.

>>> did_you_mean("wrods", ["words", "counts"])
" (did you mean 'words'?)"
>>> did_you_mean("zzz", ["words"])
''
"""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or "" when none is close."""
    import difflib  # here: every process imports this module, few ever need a hint

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""

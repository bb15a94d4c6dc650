"""The grammar of a ``%%topology`` cell: text in, plain data out (nothing is looked up yet).

One line per component; the grammar is in ``docs/topology-magic.md``. Every word keeps its
column, so a mistake found now or later, while building, is shown with a caret under it.

>>> cell = parse_cell("wordcount ackers=1", "count: Counter * 4 <- words fields(word) tick=5")
>>> cell.name.text, [(o.key.text, o.value.text) for o in cell.options]
('wordcount', [('ackers', '1')])
>>> (count,) = cell.components
>>> count.id.text, count.impl.text, count.parallelism
('count', 'Counter', 4)
>>> [(i.source.text, i.grouping_name, [a.text for a in i.args]) for i in count.inputs]
[('words', 'fields', ['word'])]
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from runtime import TopologyError

MAGIC = "%%topology"  # an optional prefix of the header line
DEFAULT_GROUPING = "shuffle"  # the grouping of an input that names none
# grouping name -> how many arguments it takes in parentheses ("+" means one or more)
GROUPINGS = {"shuffle": 0, "fields": "+", "partial_key": "+", "all": 0, "global": 0,
             "local_or_shuffle": 0, "direct": 0, "custom": 1}


class TopologySyntaxError(TopologyError):
    """A ``%%topology`` cell that cannot be built: the line, a caret under the word, the problem.

    ``lineno`` counts the cell's lines from 1, the header line being line 1.
    """

    def __init__(self, problem: str, *, lineno: int, line: str, col: int, width: int = 1):
        self.problem, self.lineno, self.line, self.col = problem, lineno, line, col
        caret = " " * col + "^" * max(width, 1)
        super().__init__(f"line {lineno}: {problem}\n    {line}\n    {caret}")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean `x`?)`` for the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


@dataclass(frozen=True)
class Token:
    """A word or symbol of one line, and the column it starts at."""

    kind: str  # "word", "string", "end", or the symbol itself: ":", "*", "<-", ",", ...
    text: str
    col: int


@dataclass(frozen=True)
class Line:
    """One line of the cell, numbered as the user sees it."""

    number: int
    text: str
    start: int = 0  # the column tokens start at (past a leading ``%%topology``)

    def error(self, problem: str, token: Token) -> TopologySyntaxError:
        return TopologySyntaxError(problem, lineno=self.number, line=self.text, col=token.col,
                                   width=len(token.text))


@dataclass(frozen=True)
class Option:
    key: Token
    value: Token  # still text: the builder reads it as a literal


@dataclass(frozen=True)
class Input:
    """``source[stream] grouping(args)``; stream and grouping may be left out."""

    source: Token
    stream: Token | None
    grouping: Token | None
    args: tuple[Token, ...] = ()

    @property
    def grouping_name(self) -> str:
        return self.grouping.text if self.grouping else DEFAULT_GROUPING


@dataclass(frozen=True)
class ComponentLine:
    line: Line
    id: Token
    impl: Token
    parallelism: int
    arrow: Token | None  # the ``<-`` token, when the line has inputs
    inputs: tuple[Input, ...]
    options: tuple[Option, ...]


@dataclass(frozen=True)
class Cell:
    line: Line  # the header line
    name: Token
    options: tuple[Option, ...]
    components: tuple[ComponentLine, ...]


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#.*)
  | (?P<string>'[^'\n]*'|"[^"\n]*")
  | (?P<arrow><-)
  | (?P<word>[A-Za-z0-9_.+\-]+)
  | (?P<symbol>[:*,\[\]()=])
""", re.VERBOSE)


def tokenize(line: Line) -> list[Token]:
    """The line's tokens, ending with an ``end`` token; comments are dropped."""
    tokens, pos = [], line.start
    while pos < len(line.text):
        m = _TOKEN.match(line.text, pos)
        if m is None:
            bad = Token("?", line.text[pos], pos)
            raise line.error(f"unexpected character `{bad.text}`", bad)
        kind, pos = m.lastgroup, m.end()
        if kind in ("word", "string"):
            tokens.append(Token(kind, m.group(), m.start()))
        elif kind in ("arrow", "symbol"):
            tokens.append(Token(m.group(), m.group(), m.start()))
    return tokens + [Token("end", "", len(line.text.rstrip()))]


class _Cursor:
    """Reads one line's tokens left to right."""

    def __init__(self, line: Line) -> None:
        self.line, self.tokens, self.i = line, tokenize(line), 0

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def accept(self, kind: str) -> Token | None:
        tok = self.peek()
        if tok.kind != kind:
            return None
        self.i += 1
        return tok

    def expect(self, kind: str, what: str) -> Token:
        tok = self.accept(kind)
        if tok is None:
            raise self.error(f"expected {what}, found {describe(self.peek())}")
        return tok

    def error(self, problem: str, token: Token | None = None) -> TopologySyntaxError:
        return self.line.error(problem, token or self.peek())


def describe(tok: Token) -> str:
    return "the end of the line" if tok.kind == "end" else f"`{tok.text}`"


def parse_cell(header: str, body: str) -> Cell:
    """Parse a cell's header (``NAME key=value ...``) and body (a component per line)."""
    text = header.expandtabs().rstrip()
    magic = text.lstrip().startswith(MAGIC)
    head = Line(1, text, text.index(MAGIC) + len(MAGIC) if magic else 0)
    cur = _Cursor(head)
    name = cur.expect("word", "a topology name: %%topology NAME [option=value ...]")
    options = _options(cur)
    lines = [Line(n, text.expandtabs().rstrip()) for n, text in enumerate(body.splitlines(), 2)]
    components = tuple(_component(_Cursor(ln)) for ln in lines if _has_tokens(ln))
    _check_unique(components)
    return Cell(head, name, options, components)


def _has_tokens(line: Line) -> bool:
    return len(tokenize(line)) > 1


def _component(cur: _Cursor) -> ComponentLine:
    ident = cur.expect("word", "a component id")
    cur.expect(":", f"`:` after the component id `{ident.text}`")
    impl = cur.expect("word", "a spout or bolt class (a name in the notebook)")
    parallelism = _parallelism(cur) if cur.accept("*") else 1
    arrow = cur.accept("<-")
    inputs = _inputs(cur) if arrow else ()
    return ComponentLine(cur.line, ident, impl, parallelism, arrow, inputs, _options(cur))


def _parallelism(cur: _Cursor) -> int:
    tok = cur.expect("word", "a parallelism after `*` (an integer >= 1)")
    if not tok.text.isdigit() or int(tok.text) < 1:
        raise cur.error(f"parallelism must be an integer >= 1, not `{tok.text}`", tok)
    return int(tok.text)


def _inputs(cur: _Cursor) -> tuple[Input, ...]:
    inputs = [_input(cur)]
    while cur.accept(","):
        inputs.append(_input(cur))
    return tuple(inputs)


def _input(cur: _Cursor) -> Input:
    source = cur.expect("word", "a source component id")
    stream = None
    if cur.accept("["):
        stream = cur.expect("word", "a stream id inside `[...]`")
        cur.expect("]", "`]` after the stream id")
    if cur.peek().kind != "word" or cur.peek(1).kind == "=":
        return Input(source, stream, None)
    grouping = cur.accept("word")
    return Input(source, stream, grouping, _grouping_args(cur, grouping))


def _grouping_args(cur: _Cursor, grouping: Token) -> tuple[Token, ...]:
    arity = GROUPINGS.get(grouping.text)
    if arity is None:
        hint = did_you_mean(grouping.text, GROUPINGS)
        raise cur.error(f"unknown grouping `{grouping.text}`{hint}; the groupings are "
                        f"{', '.join(GROUPINGS)}", grouping)
    if arity == 0:
        if cur.peek().kind == "(":
            raise cur.error(f"the `{grouping.text}` grouping takes no arguments")
        return ()
    cur.expect("(", f"`(` after `{grouping.text}`")
    args = [cur.expect("word", f"an argument of `{grouping.text}(...)`")]
    while cur.accept(","):
        args.append(cur.expect("word", f"an argument of `{grouping.text}(...)`"))
    cur.expect(")", f"`)` to close `{grouping.text}(...)`")
    if arity == 1 and len(args) != 1:
        raise cur.error(f"`{grouping.text}(...)` takes exactly one name", args[1])
    return tuple(args)


def _options(cur: _Cursor) -> tuple[Option, ...]:
    options = []
    while cur.peek().kind != "end":
        key = cur.peek()
        if key.kind != "word" or cur.peek(1).kind != "=":
            raise cur.error(f"unexpected {describe(key)}: separate inputs with `,` and write "
                            "options as key=value")
        cur.i += 2
        value = cur.accept("word") or cur.accept("string")
        if value is None:
            raise cur.error(f"expected a value after `{key.text}=`, found {describe(cur.peek())}")
        options.append(Option(key, value))
    return tuple(options)


def _check_unique(components: tuple[ComponentLine, ...]) -> None:
    seen: dict[str, ComponentLine] = {}
    for comp in components:
        first = seen.setdefault(comp.id.text, comp)
        if first is not comp:
            raise comp.line.error(f"component `{comp.id.text}` is already declared on line "
                                  f"{first.line.number}", comp.id)

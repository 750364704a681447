"""The launch line of a pasted script, with the script's own shell variables expanded.

The frameworks' example scripts set their sizes in variables before the launch
(``GEN_TP=${GEN_TP:-16}``, ``NNODES=${NNODES:-2}``) and OpenRLHF's newer ones pass flags in
arrays (``ENGINE_ARGS=( --actor.num_nodes 1 ... )`` then ``${ENGINE_ARGS[@]}``). A user pastes
the script; rlsim reads it as bash would, without running anything: assignments in order (a
variable's own default when the environment does not set it, as on a fresh shell), arrays,
``${1:-default}`` positionals, ``$((arithmetic))``. Command substitutions ``$(...)`` and
variables set nowhere in the script stay as written, for the reader to name.
"""

from __future__ import annotations

import contextlib
import re
import shlex

ASSIGN = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+)?([A-Za-z_]\w*)=(.*)$", re.S)
ARRAY_OPEN = re.compile(r"^\s*(?:export\s+|local\s+)?([A-Za-z_]\w*)=\((.*)$", re.S)
ARITH = re.compile(r"^[\d\s+\-*/%()]+$")
NAME = re.compile(r"[A-Za-z_]\w*|\d+|@|\*|#")


class Shell:
    """Variables and arrays of a script as read so far."""

    def __init__(self) -> None:
        self.vars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}

    def expand(self, text: str) -> str:
        """``text`` with the variables known so far substituted, outside single quotes."""
        out, i, quote = [], 0, ""
        while i < len(text):
            c = text[i]
            if c == "'" and quote != '"':
                quote = "" if quote == "'" else "'"
            elif c == '"' and quote != "'":
                quote = "" if quote == '"' else '"'
            elif c == "\\" and quote != "'" and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            elif c == "$" and quote != "'":
                value, end = self._dollar(text, i)
                if end > i:
                    out.append(value)
                    i = end
                    continue
            out.append(c)
            i += 1
        return "".join(out)

    def _dollar(self, text: str, i: int) -> tuple[str, int]:
        """The expansion of the ``$...`` at ``text[i]`` and where it ends (``i``: leave it)."""
        rest = text[i + 1:]
        if rest.startswith("(("):
            close = _closing(text, i + 3, "((", "))")
            if close < 0:
                return "", i
            # names inside arithmetic need no $ (bash reads ``$((a + b))``)
            expr = re.sub(r"[A-Za-z_]\w*", lambda m: self.vars.get(m.group(), m.group()),
                          self.expand(text[i + 3:close]))
            if ARITH.match(expr) and "**" not in expr:
                try:
                    return str(int(eval(expr.replace("/", "//"), {"__builtins__": {}}))), close + 2
                except (ArithmeticError, SyntaxError):
                    pass
            return text[i:close + 2], close + 2
        if rest.startswith("{"):
            close = _closing(text, i + 2, "{", "}")
            if close < 0:
                return "", i
            inner = text[i + 2:close]
            return self._braced(inner, text[i:close + 1]), close + 1
        m = NAME.match(rest)
        if not m or m.group() in ("@", "*", "#"):
            return "", i
        name = m.group()
        known = self.vars.get(name)
        return (known if known is not None else text[i:i + 1 + m.end()]), i + 1 + m.end()

    def _braced(self, inner: str, written: str) -> str:
        m = re.match(r"^([A-Za-z_]\w*|\d+)(\[[@*]\])?(?::?([-=+?])(.*))?$", inner, re.S)
        if not m:
            return written
        name, index, op, word = m.groups()
        if index:
            items = self.arrays.get(name)
            return shlex.join(items) if items is not None else written
        value = self.vars.get(name)
        if op in ("-", "=") and (value is None or (value == "" and ":" in inner)):
            value = self.expand(_unquote(word))
            if op == "=":
                self.vars[name] = value
        elif op == "+":
            value = self.expand(_unquote(word)) if value else ""
        return value if value is not None else written

    def assign(self, name: str, word: str) -> None:
        if "$(" in word.replace("$((", ""):  # a command substitution: its value is unknown
            self.vars.pop(name, None)
            return
        try:
            parts = shlex.split(self.expand(word), comments=True)
        except ValueError:
            return
        self.vars[name] = " ".join(parts)


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """The index of the ``closing`` that balances an ``opening`` just before ``start``."""
    depth, i = 1, start
    while i < len(text):
        if text.startswith(closing, i):
            depth -= 1
            if depth == 0:
                return i
            i += len(closing)
        elif text.startswith(opening, i):
            depth, i = depth + 1, i + len(opening)
        else:
            i += 1
    return -1


def _unquote(word: str) -> str:
    try:
        return " ".join(shlex.split(word))
    except ValueError:
        return word


def launch_line(script: str, entry: tuple[str, ...]) -> str:
    """The logical line of ``script`` that runs one of ``entry``, expanded as bash would by the
    time it runs; the whole text when no line names the entry."""
    text = re.sub(r"\\\r?\n", " ", script)
    shell = Shell()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if any(e in line for e in entry):
            return shell.expand(line)
        if m := ARRAY_OPEN.match(line):
            body = m.group(2)
            while ")" not in _code(body) and i < len(lines):
                body += "\n" + lines[i]
                i += 1
            inner = "\n".join(_code(x) for x in body.splitlines())
            with contextlib.suppress(ValueError):
                shell.arrays[m.group(1)] = shlex.split(
                    shell.expand(inner.rsplit(")", 1)[0]), comments=True)
        elif m := ASSIGN.match(line):
            shell.assign(m.group(1), m.group(2))
    return shell.expand(text)


def _code(line: str) -> str:
    """A line without its comment (a ``#`` that starts a word)."""
    return re.sub(r"(^|\s)#.*$", "", line)

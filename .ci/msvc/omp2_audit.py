"""Check that every OpenMP pragma in C files is OpenMP 2.0, as MSVC's /openmp takes it.

clang parses OpenMP 5 whatever _OPENMP says, so the MSVC-shaped compile of
.ci/msvc-shaped.sh would accept a construct MSVC rejects (``collapse``,
``task``, ``schedule(auto)``, an unsigned loop variable...). This script
reads the pragmas themselves: each directive and clause must be one of the
OpenMP C/C++ 2.0 specification's (March 2002, chapter 2), and the loop
after ``omp for`` must have a signed integer variable (2.0, section 2.4.1;
MSVC error C3016 otherwise).

    python .ci/msvc/omp2_audit.py FILE.c [FILE.h ...]

Prints one line per pragma and exits 1 on the first rule broken in any file.
"""

from __future__ import annotations

import re
import sys

# Directive -> the clauses OpenMP 2.0 allows on it.
_DATA = {"private", "firstprivate", "shared", "default", "reduction", "copyin"}
CLAUSES = {
    "parallel": _DATA | {"if", "num_threads"},
    "for": {"private", "firstprivate", "lastprivate", "reduction", "ordered", "schedule", "nowait"},
    "sections": {"private", "firstprivate", "lastprivate", "reduction", "nowait"},
    "section": set(),
    "single": {"private", "firstprivate", "copyprivate", "nowait"},
    "master": set(),
    "critical": set(),
    "barrier": set(),
    "atomic": set(),
    "flush": set(),
    "ordered": set(),
    "threadprivate": set(),
}
CLAUSES["parallel for"] = (CLAUSES["parallel"] | CLAUSES["for"]) - {"nowait"}
CLAUSES["parallel sections"] = (CLAUSES["parallel"] | CLAUSES["sections"]) - {"nowait"}
SCHEDULES = {"static", "dynamic", "guided", "runtime"}
REDUCTIONS = {"+", "*", "-", "&", "|", "^", "&&", "||"}
DEFAULTS = {"shared", "none"}
SIGNED = re.compile(
    r"^(const\s+)?(signed\s+)?(int|long|long\s+int|long\s+long|long\s+long\s+int|short|signed\s+char|"
    r"Py_ssize_t|ptrdiff_t|intptr_t|int8_t|int16_t|int32_t|int64_t|npy_intp|__int64|ssize_t)$"
)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with backslash continuations joined."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    return out


def _clauses(rest: str) -> list[tuple[str, str | None]]:
    """[(name, argument or None)] of a clause list, parentheses balanced."""
    found, i = [], 0
    while i < len(rest):
        if rest[i] in " \t,":
            i += 1
            continue
        m = re.match(r"[A-Za-z_]\w*", rest[i:])
        if not m:
            raise ValueError(f"cannot read the clauses at {rest[i:]!r}")
        name, i = m.group(0), i + m.end()
        while i < len(rest) and rest[i] in " \t":
            i += 1
        arg = None
        if i < len(rest) and rest[i] == "(":
            depth, j = 0, i
            while j < len(rest):
                depth += rest[j] == "("
                depth -= rest[j] == ")"
                j += 1
                if depth == 0:
                    break
            arg, i = rest[i + 1 : j - 1].strip(), j
        found.append((name, arg))
    return found


def _loop_variable_type(lines: list[tuple[int, str]], at: int) -> tuple[str, str]:
    """The variable of the for loop after the pragma at index `at`, and its declared type."""
    for _, line in lines[at + 1 :]:
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"for\s*\(\s*(?:([\w\s]+?)\s+)?(\w+)\s*=", s)
        if not m:
            raise ValueError(f"no for loop after 'omp for': {s[:60]!r}")
        if m.group(1):
            return m.group(2), m.group(1)
        var = m.group(2)
        decl = re.compile(rf"^\s*((?:const\s+)?[A-Za-z_][\w ]*?)\s+(?:\w+\s*,\s*)*{re.escape(var)}\s*(?:[,;=])")
        for _, back in reversed(lines[:at]):
            d = decl.match(back)
            if d and not back.strip().startswith(("return", "for", "if")):
                return var, " ".join(d.group(1).split())
        raise ValueError(f"no declaration of the loop variable {var}")
    raise ValueError("no loop after 'omp for'")


def audit(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = _logical_lines(f.read())
    problems = []
    for k, (n, line) in enumerate(lines):
        m = re.match(r"\s*#\s*pragma\s+omp\s+(.*)$", line)
        if not m:
            continue
        text = m.group(1).strip()
        where = f"{path}:{n}"
        words = text.split()
        directive = " ".join(words[:2]) if " ".join(words[:2]) in CLAUSES else (words[0] if words else "")
        if directive not in CLAUSES:
            problems.append(f"{where}: '{directive}' is not an OpenMP 2.0 directive")
            continue
        rest = text[len(directive) :].strip()
        if directive in ("critical", "flush", "threadprivate"):
            print(f"{where}: omp {text}")
            continue
        try:
            clauses = _clauses(rest)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        for name, arg in clauses:
            if name not in CLAUSES[directive]:
                problems.append(f"{where}: clause '{name}' is not OpenMP 2.0 on '{directive}'")
            elif name == "schedule":
                kind = (arg or "").split(",")[0].strip()
                if kind not in SCHEDULES:
                    problems.append(f"{where}: schedule({arg}) is not OpenMP 2.0")
            elif name == "reduction":
                op = (arg or "").split(":")[0].strip()
                if op not in REDUCTIONS:
                    problems.append(f"{where}: reduction operator '{op}' is not OpenMP 2.0")
            elif name == "default" and (arg or "") not in DEFAULTS:
                problems.append(f"{where}: default({arg}) is not OpenMP 2.0")
        if directive in ("for", "parallel for"):
            try:
                var, typ = _loop_variable_type(lines, k)
            except ValueError as e:
                problems.append(f"{where}: {e}")
                continue
            if not SIGNED.match(typ):
                problems.append(f"{where}: loop variable {var} is '{typ}', not a signed integer (MSVC C3016)")
            print(f"{where}: omp {text}  [loop variable {var}: {typ}]")
        else:
            print(f"{where}: omp {text}")
    return problems


def main(paths: list[str]) -> int:
    if not paths:
        sys.exit(__doc__)
    problems = [p for path in paths for p in audit(path)]
    for p in problems:
        print(f"error: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Checks that docs/ENVIRONMENT.md lists exactly the RBEE_* variables the C++ code reads.

    scripts/check_env_docs.py [ROOT]

A variable "read by the code" is an "RBEE_..." string literal in a C++ file under src/, include/, apps/, bench/,
tools/ or tests/ (getenv, env::flag_or and friends, setenv of a switch; messages that quote a name count too, which
keeps a renamed variable's old name from lingering in an error text). A variable "listed" is a `RBEE_...` name in
the first column of a table row of docs/ENVIRONMENT.md. Prints what is missing on either side and exits 1 when
anything is; ctest runs it as `env_docs_check`.
"""
import pathlib
import re
import sys

CPP_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}
FOLDERS = ("src", "include", "apps", "bench", "tools", "tests")
LITERAL = re.compile(r'"(RBEE_[A-Z0-9_]+)"')
TABLE_ROW = re.compile(r"^\|\s*`(RBEE_[A-Z0-9_]+)`\s*\|")


def read_by_code(root: pathlib.Path) -> dict:
    """Name -> first file that reads it."""
    names = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in CPP_SUFFIXES or not path.is_file():
                continue
            for name in LITERAL.findall(path.read_text(errors="replace")):
                names.setdefault(name, path.relative_to(root))
    return names


def listed_in_docs(doc: pathlib.Path) -> set:
    return {m.group(1) for line in doc.read_text().splitlines() if (m := TABLE_ROW.match(line))}


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    doc = root / "docs" / "ENVIRONMENT.md"
    code = read_by_code(root)
    docs = listed_in_docs(doc)
    missing = sorted(set(code) - docs)
    stale = sorted(docs - set(code))
    for name in missing:
        print(f"{code[name]}: reads {name}, which docs/ENVIRONMENT.md does not list")
    for name in stale:
        print(f"docs/ENVIRONMENT.md: lists {name}, which no C++ file reads")
    if missing or stale:
        return 1
    print(f"env_docs_check: {len(code)} RBEE_* variables, all listed in docs/ENVIRONMENT.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (80 lines by default) and exits 1 if there are any.

Usage: check_function_length.py [--limit N] DIR_OR_FILE...

A function is a brace block opened at namespace or class scope after a closing parenthesis (its parameter
list); its length runs from the line of its opening brace to the line of its closing one. Strings, character
literals and comments are skipped, so braces inside them do not count. A heuristic, not a parser: it only
has to be right on this project's code, where it keeps the 80-line rule from creeping back.
"""
import argparse
import os
import re
import sys

from cpp_text import blank_comments

SOURCE_SUFFIXES = (".cpp", ".h", ".cu")


def long_functions(path, limit):
    with open(path, encoding="utf-8") as f:
        text = blank_comments(f.read(), literals=True)
    stack = []  # (kind, start line, name)
    head_start = 0  # where the text that precedes the next brace begins
    line = 1
    found = []
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c in ";":
            head_start = i + 1
        elif c == "{":
            head = text[head_start:i]
            outer = stack[-1][0] if stack else "namespace"
            if re.search(r"\bnamespace\b", head) or re.search(r'\bextern\s*$', head):
                kind = "namespace"
            elif outer in ("namespace", "type") and re.search(r"\b(class|struct|union|enum)\b[^()]*$", head):
                kind = "type"
            elif outer in ("namespace", "type") and ")" in head:
                kind = "function"
            else:
                kind = "block"
            name = re.findall(r"([~\w:<>]+)\s*\(", head)
            stack.append((kind, line, name[0] if name else "?"))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function" and line - start + 1 > limit:
                    found.append((path, start, name, line - start + 1))
            head_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(SOURCE_SUFFIXES)]
        else:
            files.append(p)
    found = [f for path in sorted(files) for f in long_functions(path, args.limit)]
    for path, start, name, length in found:
        print(f"{path}:{start}: {name} is {length} lines (limit {args.limit})")
    print(f"{len(files)} files checked, {len(found)} functions over {args.limit} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

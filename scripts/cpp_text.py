"""C++ source text with its comments (and, on request, its string and character literals) blanked out, every
newline kept so that line numbers stay right. Shared by the source checks (check_function_length.py,
check_portability.py)."""
import re


def _blank(text):
    return re.sub(r"[^\n]", " ", text)


def blank_comments(text, literals=False):
    """`text` with // and /* */ comments replaced by spaces; with `literals`, its string, raw string and
    character literals too (a quote after a letter or digit is a digit separator, not a literal)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_blank(text[i:j]))
        elif text.startswith('R"', i) and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(_blank(text[i:j]) if literals else text[i:j])
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(_blank(text[i:j]) if literals else text[i:j])
        else:
            out.append(c)
            j = i + 1
        i = j
    return "".join(out)

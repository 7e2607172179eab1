"""Checks the documentation against the tree, so that a page cannot point at what is gone.

  python3 tests/python/check_docs.py ROOT                 links, paths, tests named, sites, the front page's length
  python3 tests/python/check_docs.py ROOT --tools DIR     also: every flag of every tool's --help is on its page

Checked in README.md and docs/*.md:
- every relative link ([text](path#anchor), images too) names a file or folder that exists and, for a Markdown
  target, an anchor one of its headings makes (GitHub's slugs);
- every repository path written in code spans (`src/...`, `tests/...`, `scripts/...`, ...) exists (`*` globs; a
  built target by its .cpp; what a run writes under data/generated/ is left out);
- README.md stays a front page: under 260 lines;
- docs/bad_input.md: every doctest case a row names ("case", or "prefix ..." for a case that starts so) is a
  TEST_CASE of tests/;
- docs/sites.md lists every row of the site table (src/sites/sites.cpp);
- docs/reference_commands.md: every flag of a row that runs one of our tools is one that
  tests/torch/test_reference_commands.cpp passes.
Each failure is printed with the page and what it names; the exit code is the number of failures (at most 1).
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import unicodedata

FRONT_PAGE_MAX_LINES = 260
BUILT_FROM = ("", ".cpp")
SOURCE_ROOTS = ("src/", "tests/", "scripts/", "tools/", "bench/", "fuzz/", "cmake/", "docs/", "data/", ".ci/")

# Each tool's page, and the subcommands whose --help it must cover.
TOOL_PAGES = {
    "capture_activations": ("docs/capture_activations.md", [[]]),
    "train_binary_probes": ("docs/train_probes.md", [[]]),
    "train_probes": ("docs/train_probes.md", [[]]),
    "multi_probe_inference": ("docs/multi_probe_inference.md", [[]]),
    "probe_server": ("docs/probe_server.md", [[]]),
    "inspect_model": ("docs/inspect_model.md", [[], ["info"], ["hidden"], ["generate"], ["tokenize"], ["device"]]),
    "make_example": ("docs/inspect_model.md", [[], ["dataset"], ["model"]]),
    "merge_activations": ("docs/inspect_model.md", [[]]),
    "make_steering_vectors": ("docs/steering.md", [[]]),
    "steering_sweep": ("docs/steering.md", [[]]),
    "calibrate_probes": ("docs/monitoring.md", [[]]),
    "patch_activations": ("docs/patching.md", [[]]),
}


def pages(root):
    return ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def without_code(text):
    """The text with fenced code blocks and code spans blanked (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped (but - and _), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = "".join(c for c in text.lower() if c in "-_ " or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(text):
    found, seen = set(), {}
    for line in re.sub(r"^```.*?^```", "", text, flags=re.S | re.M).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def check_links(root, page, text, failures):
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", without_code(text)):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not os.path.exists(os.path.join(root, resolved)):
            failures.append(f"{page}: the link ({target}) names {resolved}, which does not exist")
            continue
        if anchor and resolved.endswith(".md") and anchor not in anchors(read(root, resolved)):
            failures.append(f"{page}: the link ({target}) names the anchor #{anchor}, which no heading of {resolved} makes")


def check_paths(root, page, text, failures):
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in span.split():
            word = word.rstrip(".,;:)")
            if not word.startswith(SOURCE_ROOTS) or re.search(r"[{}<>$|\[]", word) or "..." in word:
                continue
            # What a run writes (data/generated/) is not in the tree; a built target is named by its source.
            if word.startswith("data/generated/") or any(glob.glob(os.path.join(root, word + e)) for e in BUILT_FROM):
                continue
            if not glob.glob(os.path.join(root, word)):
                failures.append(f"{page}: `{word}` does not exist")


def test_cases(root):
    cases = set()
    for path in glob.glob(os.path.join(root, "tests", "**", "*.cpp"), recursive=True):
        text = read(root, os.path.relpath(path, root))
        cases.update(re.findall(r'TEST_CASE(?:_FIXTURE\(\s*\w+\s*,\s*|\()"((?:[^"\\]|\\.)*)"', text))
    return {c.replace('\\"', '"') for c in cases}


def check_bad_input_tests(root, failures):
    page = "docs/bad_input.md"
    cases = test_cases(root)
    for line in read(root, page).split("\n"):
        if not line.startswith("| ") or line.startswith("| Bad input |"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        tests = re.sub(r"`[^`]*`", "", cells[-1])
        for quoted in re.findall(r'"([^"]+)"', tests):
            name = quoted.rstrip()
            prefix = name.endswith("...")
            name = name[:-3].rstrip() if prefix else name
            if not any(c == name or (prefix and c.startswith(name)) for c in cases):
                failures.append(f'{page}: no test case {"starts with" if prefix else "is"} "{name}" ({cells[0][:60]})')


def check_sites(root, failures):
    names = re.findall(r'\{Site::k\w+, "(\w+)"', read(root, "src/sites/sites.cpp"))
    page = read(root, "docs/sites.md")
    if not names:
        failures.append("src/sites/sites.cpp: no site rows found (has the table's form changed?)")
    for name in names:
        if not re.search(r"^\| `" + re.escape(name) + r"` \|", page, flags=re.M):
            failures.append(f"docs/sites.md: the site table has no row for `{name}` (src/sites/sites.cpp has one)")


def check_registry(failures, registry, names, page, text, what, row_pattern):
    """Every name of a registry (read from its source) has a row in its docs page's table."""
    if not names:
        failures.append(f"{registry}: no {what} found (has the registry's form changed?)")
    for name in names:
        if not re.search(row_pattern(re.escape(name)), text, flags=re.M):
            failures.append(f"{page}: no row for the {what} `{name}` ({registry} has it)")


def check_registries(root, failures):
    """The docs' lists of families, probe kinds and endpoints equal their registries (sites: check_sites)."""
    families = re.findall(r'^\s*\{"(\w+)", resolve_', read(root, "src/model/families.cpp"), flags=re.M)
    check_registry(failures, "src/model/families.cpp", families, "docs/models.md", read(root, "docs/models.md"),
                   "family", lambda n: r"^\| (`\w+`, )*`" + n + r"`")
    kinds = []
    for path in sorted(os.listdir(os.path.join(root, "src/probes/kinds"))):
        kinds += re.findall(r'name\(\) const override \{ return "([\w-]+)"; \}', read(root, "src/probes/kinds/" + path))
    check_registry(failures, "src/probes/kinds/", kinds, "docs/train_probes.md", read(root, "docs/train_probes.md"),
                   "probe kind", lambda n: r"^\| `" + n + r"` \|")
    routes = re.findall(r'\{"(GET|POST)", "(/[\w/.-]*)", ErrorStyle::', read(root, "src/server/probe_server.cpp"))
    check_registry(failures, "src/server/probe_server.cpp", [f"{m} {p}" for m, p in routes], "docs/probe_server.md",
                   read(root, "docs/probe_server.md"), "endpoint", lambda n: r"^\| `" + n + r"` \|")


def check_reference_commands(root, failures):
    page = "docs/reference_commands.md"
    test = read(root, "tests/torch/test_reference_commands.cpp")
    tools = ("capture_activations", "train_binary_probes", "train_probes", "multi_probe_inference")
    for line in read(root, page).split("\n"):
        if not line.startswith("| `") and not line.startswith("| its training"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 2 or not any(cells[1].startswith(f"`{tool}") for tool in tools):
            continue
        for flag in sorted(set(re.findall(r"--[a-z][a-z0-9-]*", line))):
            if not re.search(re.escape(flag) + r"(?![a-z0-9-])", test):
                failures.append(f"{page}: {flag} is in the table but tests/torch/test_reference_commands.cpp never passes it")


def help_flags(tool, subcommand):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run([tool] + subcommand + ["--help"], capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(subcommand)} --help exited {out.returncode}: {out.stderr}")
    flags = set()
    for line in out.stdout.split("\n"):
        m = re.match(r"^\s+(-[^\s]+)", line)
        if m:
            flags.update(f for f in m.group(1).split(",") if f.startswith("--"))
    return flags


def check_flags(root, tools_dir, failures):
    for tool, (page, subcommands) in TOOL_PAGES.items():
        text = read(root, page)
        for subcommand in subcommands:
            for flag in sorted(help_flags(os.path.join(tools_dir, tool), subcommand)):
                if not re.search(re.escape(flag) + r"(?![a-z0-9-])", text):
                    failures.append(f"{page}: {tool} {' '.join(subcommand)} takes {flag}, which the page never names")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--tools", help="the built tools' folder: check every flag of their --help")
    args = parser.parse_args()
    failures = []
    if args.tools:
        check_flags(args.root, args.tools, failures)
    else:
        for page in pages(args.root):
            text = read(args.root, page)
            check_links(args.root, page, text, failures)
            check_paths(args.root, page, text, failures)
        lines = read(args.root, "README.md").count("\n")
        if lines >= FRONT_PAGE_MAX_LINES:
            failures.append(f"README.md: {lines} lines; the front page stays under {FRONT_PAGE_MAX_LINES} (move the rest to docs/)")
        check_bad_input_tests(args.root, failures)
        check_sites(args.root, failures)
        check_registries(args.root, failures)
        check_reference_commands(args.root, failures)
    for failure in failures:
        print(failure)
    print(f"{len(failures)} problems" if failures else "the docs agree with the tree")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

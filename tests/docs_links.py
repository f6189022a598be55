#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md names a file that exists,
and every #anchor a heading of that file (as GitHub makes anchors: lower
case, punctuation dropped, spaces to hyphens, -1, -2 ... for repeats).
Not handled (the docs use none): reference-style links, link titles,
setext headings, emphasis with underscores in a heading.

    docs_links.py REPO_ROOT

Prints each broken link as file:line: target (why) and exits 1 if any."""
import pathlib
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    s = "".join(c for c in s.lower() if c.isalnum() or c in " -_")
    return s.replace(" ", "-")


def anchors(path):
    """The anchors of a file's headings: a repeated one gets the first of
    -1, -2 ... not taken yet (by an earlier heading of either kind)."""
    result = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = anchor = slug(m.group(2))
        n = 0
        while anchor in result:
            n += 1
            anchor = f"{base}-{n}"
        result.add(anchor)
    return result


def main(root):
    root = pathlib.Path(root)
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    cache, broken, checked = {}, [], 0
    for f in files:
        for number, line in prose_lines(f.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # https:, mailto:
                    continue
                checked += 1
                path, _, anchor = target.partition("#")
                dest = (f.parent / path).resolve() if path else f
                where = f"{f.relative_to(root)}:{number}: {target}"
                if not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor:
                    if dest.suffix != ".md":
                        broken.append(f"{where} (an anchor into a file that is not Markdown)")
                        continue
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        broken.append(f"{where} (no heading makes #{anchor})")
    for b in broken:
        print(b)
    print(f"{checked} links checked in {len(files)} files, {len(broken)} broken")
    return 1 if broken or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))

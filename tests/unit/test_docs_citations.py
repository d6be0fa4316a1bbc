"""The repository stands alone: every citation points into ``docs/``, at something that exists.

Comments and docstrings say where an upstream fact comes from by naming a heading of a doc,
``(docs/upstream.md, "ADD")``, or a numbered quirk, ``(docs/upstream.md, quirk 12)``. A citation
of a document that is not in the repository (section-sign numbers of an outside reference) tells
a reader nothing, and a heading renamed without its citations leaves them pointing nowhere;
both fail here. A citation stays on one line so that this check can read it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("multusd", "cni_shim", "tests", "bench", "docs", "README.md")
SKIPPED_DIRS = {"__pycache__", "results"}

# Built from its name so that this file does not match itself.
SECTION_SIGN = "\N{SECTION SIGN}"
OUTSIDE_REFERENCE = re.compile(
    rf"(?:reference|python-stack|multus-behavior)\s*{SECTION_SIGN}|{SECTION_SIGN}\s*\d"
)
# docs/<file>.md, "<heading>" (the comma may be left out), optionally ` and "<heading>"`...
HEADING_CITATION = re.compile(r'docs/([\w-]+)\.md,? "([^"\n]+)"((?: and "[^"\n]+")*)')
QUIRK_CITATION = re.compile(r"docs/([\w-]+)\.md, quirks? (\d+)")
# The opening of a heading citation whose closing quote is not on the same line.
BROKEN_CITATION = re.compile(r'docs/[\w-]+\.md,? "[^"\n]*$', re.MULTILINE)
QUIRKS_HEADING = "Known upstream quirks"


def _text_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            if not path.is_file() or SKIPPED_DIRS & set(path.relative_to(ROOT).parts):
                continue
            files.append(path)
    return files


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # images and other binary files cite nothing
        return None


@cache
def _headings(doc: str) -> frozenset[str]:
    """The Markdown headings of ``docs/<doc>.md``, outside fenced code blocks."""
    headings: set[str] = set()
    fenced = False
    for line in (ROOT / "docs" / f"{doc}.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+?)\s*#*\s*$", line)):
            headings.add(match.group(1))
    return frozenset(headings)


@cache
def _quirk_numbers(doc: str) -> list[int]:
    """The numbers of the table rows in ``docs/<doc>.md``'s section of quirks."""
    text = (ROOT / "docs" / f"{doc}.md").read_text(encoding="utf-8")
    start = text.find(f"## {QUIRKS_HEADING}")
    if start < 0:
        return []
    end = text.find("\n#", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    return [int(n) for n in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)]


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def _problems() -> list[str]:
    problems: list[str] = []
    for path in _text_files():
        text = _read(path)
        if text is None:
            continue
        for match in OUTSIDE_REFERENCE.finditer(text):
            problems.append(f"{_where(path, text, match.start())}: cites an outside document")
        for match in BROKEN_CITATION.finditer(text):
            problems.append(
                f"{_where(path, text, match.start())}: keep the citation on one line: "
                f"{match.group(0).strip()!r}"
            )
        for match in HEADING_CITATION.finditer(text):
            doc = match.group(1)
            where = _where(path, text, match.start())
            if not (ROOT / "docs" / f"{doc}.md").is_file():
                problems.append(f"{where}: docs/{doc}.md does not exist")
                continue
            names = [match.group(2), *re.findall(r'"([^"\n]+)"', match.group(3))]
            problems.extend(
                f'{where}: docs/{doc}.md has no heading "{name}"'
                for name in names
                if name not in _headings(doc)
            )
        for match in QUIRK_CITATION.finditer(text):
            doc, number = match.group(1), int(match.group(2))
            if not (ROOT / "docs" / f"{doc}.md").is_file() or number not in _quirk_numbers(doc):
                problems.append(
                    f"{_where(path, text, match.start())}: docs/{doc}.md has no quirk {number}"
                )
    return problems


def test_every_citation_points_into_docs_at_something_that_exists() -> None:
    problems = _problems()
    assert not problems, "\n".join(problems)


def test_the_checker_sees_what_it_must_refuse() -> None:
    """The patterns themselves, on text that must fail and text that must pass."""
    assert OUTSIDE_REFERENCE.search(f"as upstream (reference {SECTION_SIGN}6.9.2)")
    assert OUTSIDE_REFERENCE.search(f"measured (python-stack {SECTION_SIGN}3)")
    assert OUTSIDE_REFERENCE.search(f"rolled back ({SECTION_SIGN}6.9.4)")
    assert not OUTSIDE_REFERENCE.search('(docs/upstream.md, "ADD", step 7)')
    cited = HEADING_CITATION.search('(GC and STATUS: docs/upstream.md, "STATUS" and "GC").')
    assert cited is not None
    assert [cited.group(2), *re.findall(r'"([^"\n]+)"', cited.group(3))] == ["STATUS", "GC"]
    doc = "docs/" + "upstream.md"  # split, or the checker would take this line for a citation
    assert BROKEN_CITATION.search(f'see ({doc}, "Delegate runtime config\n and CNI_ARGS")')
    assert QUIRK_CITATION.search("(docs/upstream.md, quirk 12)")


def test_the_quirks_are_numbered_alike() -> None:
    """docs/compatibility.md decides on each quirk by the number docs/upstream.md gives it."""
    numbers = _quirk_numbers("upstream")
    assert numbers == list(range(1, len(numbers) + 1))
    text = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    start = text.index("## The upstream quirks, one by one")
    end = text.index("\n## ", start + 1)
    assert re.findall(r"^\| (\d+) \|", text[start:end], re.MULTILINE) == [str(n) for n in numbers]


def test_upstream_headings_are_unique() -> None:
    """A heading is its anchor and its citation's target, so each names one section."""
    text = (ROOT / "docs" / "upstream.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)
    assert len(headings) == len(set(headings))

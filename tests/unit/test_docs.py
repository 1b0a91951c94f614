"""The docs as a reader finds their way in (issue 54): every local link and anchor in
README.md, bench/README.md and docs/ leads somewhere, each page is short enough to read
(the generated variable reference aside), and every page under docs/ is one click from
the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from a3rl.paths import project_root

ROOT = project_root()
PAGES = sorted((ROOT / "docs").glob("*.md"))
READ = [ROOT / "README.md", ROOT / "bench" / "README.md", *PAGES]
GENERATED = {"role-variables.md", "reliability.md"}
MOST_LINES = 400
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", page.read_text(), re.M)}


def broken_links(pages: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for page in pages:
        for link in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page.resolve()
            if not target.exists():
                found.append(f"{page.relative_to(root)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                found.append(f"{page.relative_to(root)}: {link} (no such heading)")
    return found


def test_every_local_link_and_anchor_leads_somewhere():
    assert broken_links(READ) == []


def test_the_link_check_finds_a_missing_page_and_a_missing_heading(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# Top\n[x](b.md) [y](#top) [z](#nowhere) [w](https://e.org/x)\n")
    got = [line.split(": ", 1)[1] for line in broken_links([page], tmp_path)]
    assert got == ["b.md (no such file)", "#nowhere (no such heading)"]


@pytest.mark.parametrize("page", [p for p in PAGES if p.name not in GENERATED],
                         ids=lambda p: p.name)
def test_a_page_is_short_enough_to_read(page):
    lines = page.read_text().count("\n")
    assert lines <= MOST_LINES, (f"docs/{page.name} has {lines} lines (at most {MOST_LINES}): "
                                 "split it by topic")


def test_every_docs_page_is_one_click_from_the_readme():
    linked = {Path(link.partition("#")[0]).name
              for link in LINK.findall((ROOT / "README.md").read_text())
              if link.startswith("docs/")}
    missing = sorted(p.name for p in PAGES if p.name not in linked)
    assert not missing, f"README.md links none of: {missing}"

"""The documentation holds together: every relative link points at a file that exists,
and the README stays an entry point (the rest lives in docs/)."""

import re

import pytest
from conftest import REPO

PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "benchmarks" / "results" / "README.md",
         *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    links = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    broken = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")
              and not (page.parent / link.split("#")[0]).exists()]
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_the_readme_is_an_entry_point():
    assert len((REPO / "README.md").read_text().splitlines()) <= 300
    assert len(list((REPO / "docs").glob("*.md"))) >= 5

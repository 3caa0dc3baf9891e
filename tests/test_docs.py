"""The documentation holds together: every relative link in README.md, docs/, benchmarks/README.md (the index of the
measured record) and benchmarks/records/ (its one page a benchmark) reaches a file and, where it names one, a heading
there; every figure of README.md's headline table is found in the section of the measured record it links to, so the
landing page cannot cite a number the record does not hold; and every row of that table names its recipe files, each
run by a command of the README."""

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    REPO_ROOT / "README.md", REPO_ROOT / "benchmarks" / "README.md", REPO_ROOT / "recipes" / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "benchmarks" / "records").glob("*.md")),
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FIGURE = re.compile(r"\d+\.\d+")
HEADLINE_HEADING = "## Results"


def prose_lines(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks (where `# comment` is not a heading, nor `[a](b)` a link)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> dict[str, str]:
    """{anchor: the section's text, from its heading to the next heading of the same or a higher level}."""
    lines = prose_lines(path)
    headings = [(index, len(match[1]), match[2]) for index, line in enumerate(lines) if (match := HEADING.match(line))]
    sections, seen = {}, {}
    for position, (index, level, title) in enumerate(headings):
        end = next((other for other, other_level, _ in headings[position + 1 :] if other_level <= level), len(lines))
        anchor = slug(title)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        sections[anchor if count == 0 else f"{anchor}-{count}"] = "\n".join(lines[index:end])
    return sections


def relative_links(path: Path) -> list[str]:
    return [
        target for line in prose_lines(path) for target in LINK.findall(line)
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def resolve(page: Path, target: str) -> tuple[Path, str | None]:
    file, _, anchor = target.partition("#")
    return ((page.parent / file).resolve() if file else page), anchor or None


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page):
    broken = []
    for target in relative_links(page):
        file, anchor = resolve(page, target)
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor is not None and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO_ROOT)}: {', '.join(broken)}"


def headline_rows() -> list[str]:
    section = anchors(REPO_ROOT / "README.md")[slug(HEADLINE_HEADING.lstrip("# "))]
    return [line for line in section.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")][1:]


def recipe_links(row: str) -> list[str]:
    return [target for target in LINK.findall(row) if target.startswith("recipes/") and target.endswith(".yaml")]


def record_links(row: str) -> list[str]:
    return [target for target in LINK.findall(row) if target not in recipe_links(row)]


def readme_commands() -> str:
    """The README's fenced code, where its commands are."""
    prose = set(prose_lines(REPO_ROOT / "README.md"))
    return "\n".join(line for line in (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines() if line not in prose)


def test_the_readme_has_a_headline_table_whose_rows_each_link_to_the_record():
    rows = headline_rows()

    assert len(rows) >= 4
    assert all(len(record_links(row)) == 1 and FIGURE.search(row) for row in rows), rows


@pytest.mark.parametrize("row", headline_rows(), ids=lambda row: row.split("|")[1].strip()[:40])
def test_every_headline_row_names_its_recipe_files_and_the_readme_runs_each_with_a_command(row):
    """A row is a recipe file plus one command: each recipe it links to is run by a `--config` line of the README."""
    recipes = recipe_links(row)

    assert recipes, row
    assert [recipe for recipe in recipes if f"--config {recipe}" not in readme_commands()] == []


@pytest.mark.parametrize("row", headline_rows(), ids=lambda row: row.split("|")[1].strip()[:40])
def test_every_figure_of_a_headline_row_is_in_the_record_section_it_links_to(row):
    [target] = record_links(row)
    file, anchor = resolve(REPO_ROOT / "README.md", target)
    record = anchors(file)[anchor] if anchor else file.read_text(encoding="utf-8")
    cited = FIGURE.findall(LINK.sub("", row))

    def found(figure: str) -> bool:  # as a number of its own: 0.70 is not found in 0.706
        return re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d)", record) is not None

    assert [figure for figure in cited if not found(figure)] == []

"""``benchmarks/run_all.py`` rewrites the sections it measures and keeps the ones it does not."""

from benchmarks.run_all import kept_sections

PREVIOUS = """# Benchmark results

## 1. Runtime overhead per turn (scripted model)

old figures

<!-- section 2: measured by hand -->

## 2. Mutation testing

kept figures

## 3. Tool calls

old tool figures
"""


def test_sections_measured_by_hand_are_kept_with_their_comment() -> None:
    written = ["# Benchmark results", "", "## 1. Runtime overhead per turn (scripted model)", "", "new", ""]
    kept = kept_sections(PREVIOUS, written + ["## 3. Tool calls", "", "new tools", ""])
    assert kept == ["<!-- section 2: measured by hand -->", "", "## 2. Mutation testing", "", "kept figures", ""]


def test_a_section_is_matched_by_title_not_number() -> None:
    # renumbered in this run: the old "## 3. Tool calls" is still this run's, not kept twice
    written = ["## 1. Runtime overhead per turn (scripted model)", "## 7. Tool calls"]
    kept = kept_sections(PREVIOUS, written)
    assert "## 3. Tool calls" not in kept
    assert "## 2. Mutation testing" in kept


def test_nothing_is_kept_from_an_empty_file() -> None:
    assert kept_sections("", ["## 1. Anything"]) == []


def test_sections_are_written_in_the_order_of_their_numbers() -> None:
    from benchmarks.run_all import in_order

    lines = ["# Results", "", "## 2. Two", "b", "<!-- section 1: by hand -->", "", "## 1. One", "a", "## Extra", "x"]
    assert in_order(lines) == [
        "# Results", "", "<!-- section 1: by hand -->", "", "## 1. One", "a", "", "## 2. Two", "b", "",
        "## Extra", "x", "",
    ]  # fmt: skip

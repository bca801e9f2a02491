"""``docs/results-h200.md``'s figures on the committed files are today's gate's: the page's generated
section is exactly what ``fakes.recorded`` derives now from ``tests/data/`` and ``baselines/``
(the commands it names, run in-process). A change of the gate that changes a figure fails here
until the section is regenerated. Reads four 100 kB files and the 1.3 MB approved baseline and
judges 39 benchmarks seven times: about a second on an idle machine."""

from __future__ import annotations

import pytest

from fakes import recorded


def test_the_generated_section_of_results_h200_is_todays_gate_on_the_committed_files():
    doc = recorded.DOC.read_text(encoding="utf-8")
    now = recorded.section()
    assert doc.count(recorded.END) == 1 and recorded.BEGIN in doc
    start = doc.index(recorded.BEGIN)
    committed = doc[start:doc.index(recorded.END) + len(recorded.END)]
    assert committed == now, f"docs/results-h200.md is stale: regenerate it with `{recorded.COMMAND}`"


def test_the_headline_figures_are_the_gates_verdicts():
    """The generated text reads the verdict documents the commands print: their counts and exit codes."""
    aa = recorded.compare_json(*recorded.AA)
    inj = recorded.compare_json(*recorded.INJ)
    assert (aa["exit_code"], inj["exit_code"]) == (0, 1)
    text = recorded.section()
    for doc in (aa, inj):
        assert f"**{doc['summary']}**" in text
        assert sum(doc["counts"].values()) == 39
    assert "the approved baseline | " in text


def test_a_page_without_its_section_is_refused():
    with pytest.raises(ValueError, match="no generated section"):
        recorded.updated("# a page\n", recorded.section())
    page = f"# a page\n\n{recorded.BEGIN}\nold\n{recorded.END}\n\nrest\n"
    assert recorded.updated(page, "NEW") == "# a page\n\nNEW\n\nrest\n"

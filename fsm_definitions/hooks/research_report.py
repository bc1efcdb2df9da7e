"""The tool of the research_report example: a search over a small library of sources, faked in memory.

Load it with ``--hooks fsm_definitions/hooks/research_report.py:hooks`` (or
``Hooks.load("fsm_definitions/hooks/research_report.py:hooks")``). The library never changes, so a query
gets the same sources every time (the example's tests rely on that). A real version would call a search
API or a document index instead.

A result always has the same keys (``query`` and ``results``): the runtime merges a result into what its
``result_key`` held, so a key left out would keep an earlier call's. A query the library knows nothing about
gets the encyclopedia's search page as its one source, so any topic can be walked through offline (the
example's test file stubs the tool to show a search that finds nothing).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote_plus

from llm_fsm import Hooks

hooks = Hooks()

LIBRARY: tuple[dict[str, Any], ...] = (
    {
        "id": "nist-pqc",
        "title": "NIST releases its first post-quantum encryption standards",
        "url": "https://www.nist.gov/news-events/news/2024/08/nist-releases-first-3-finalized-post-quantum-encryption-standards",
        "summary": "In August 2024 NIST published three standards (FIPS 203, 204 and 205) for encryption that a "
        "large quantum computer could not break, and urged organisations to start moving to them.",
        "topics": ("quantum", "encryption", "cryptography"),
    },
    {
        "id": "ibm-qubits",
        "title": "What is quantum computing?",
        "url": "https://www.ibm.com/topics/quantum-computing",
        "summary": "Quantum computers use qubits, which can hold superpositions of 0 and 1 and be entangled; for "
        "some problems (simulating molecules, factoring) this promises speed-ups no classical computer can match.",
        "topics": ("quantum", "qubit", "computing"),
    },
    {
        "id": "nature-errors",
        "title": "Quantum error correction below the surface code threshold",
        "url": "https://www.nature.com/articles/s41586-024-08449-y",
        "summary": "Google's team showed in 2024 that adding qubits to an error-correcting code made its logical "
        "qubit more reliable, not less: a step towards machines that can run long computations.",
        "topics": ("quantum", "error", "computing"),
    },
    {
        "id": "iea-heat-pumps",
        "title": "The Future of Heat Pumps",
        "url": "https://www.iea.org/reports/the-future-of-heat-pumps",
        "summary": "Heat pumps move heat instead of burning fuel and deliver three to five units of heat per unit "
        "of electricity; the IEA expects them to cut global CO2 emissions by 500 million tonnes by 2030.",
        "topics": ("heat pump", "heating", "energy"),
    },
)


@hooks.tool()
def search_sources(query: str) -> dict[str, Any]:
    """Up to three sources of the library whose topics the query names, best match first, each with its id,
    title, url and summary; none matched: the encyclopedia's search page for the query."""
    words = query.lower()
    scored = [(sum(topic in words for topic in source["topics"]), n, source) for n, source in enumerate(LIBRARY)]
    found = [source for score, _, source in sorted(scored, key=lambda s: (-s[0], s[1])) if score][:3]
    if not found:
        return {"query": query, "results": [encyclopedia(query)]}
    return {"query": query, "results": [{k: v for k, v in s.items() if k != "topics"} for s in found]}


def encyclopedia(query: str) -> dict[str, Any]:
    """The one source of a query the library has nothing on: the encyclopedia's search page for it."""
    return {
        "id": "encyclopedia",
        "title": f"Encyclopedia search: {query}",
        "url": f"https://en.wikipedia.org/w/index.php?search={quote_plus(query)}",
        "summary": "The library has no summary on this topic: read the encyclopedia's articles before citing them.",
    }

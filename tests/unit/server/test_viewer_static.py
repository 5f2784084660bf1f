"""The viewer's static files stay safe by construction: no HTML parsing of data, nothing inline, nothing remote.

A grep, not a proof: the browser tests (tests/browser) check that hostile text stays inert.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parents[3] / "controller" / "ui" / "static"
VENDORED = {"prism.js": "prism.LICENSE.txt"}
"""Third-party files, each with its licence beside it. Their code is not ours to grep: it has HTML sinks
(Prism's highlightElement) that the viewer never calls; highlight.js calls only Prism.tokenize."""
SCRIPTS = sorted(p for p in STATIC.glob("*.js") if p.name not in VENDORED)

FORBIDDEN_JS = {
    "innerHTML": r"\binnerHTML\b",
    "outerHTML": r"\bouterHTML\b",
    "insertAdjacentHTML": r"\binsertAdjacentHTML\b",
    "document.write": r"\bdocument\.write",
    "eval": r"\beval\s*\(",
    "new Function": r"\bnew\s+Function\b",
    "string timers": r"set(?:Timeout|Interval)\(\s*[\"'`]",
    # (an object URL of a Blob the page itself made, for a download, is no URL anyone else chose)
    "href/src from code": r"\.(?:href|src|action|formAction)\s*=(?!\s*URL\.createObjectURL\(new Blob\()",
    "setAttribute": r"\bsetAttribute\s*\(",
    "createContextualFragment": r"createContextualFragment",
    "DOMParser": r"\bDOMParser\b",
    "remote URL": r"https?://",
}


def test_there_are_modules() -> None:
    assert {p.name for p in SCRIPTS} >= {"app.js", "api.js", "dom.js", "list.js", "session.js", "changes.js"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_html_sinks_or_code_from_strings(script: Path) -> None:
    source = script.read_text()
    found = [name for name, pattern in FORBIDDEN_JS.items() if re.search(pattern, source)]
    assert found == [], f"{script.name} uses {found}"


def test_index_has_no_inline_script_style_or_remote_asset() -> None:
    html = (STATIC / "index.html").read_text()
    assert re.findall(r"<script\b[^>]*>", html) == ['<script type="module" src="/ui/assets/app.js">']
    assert "<style" not in html and not re.search(r"\sstyle\s*=", html)
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler"
    assert not re.search(r"(?:src|href)\s*=\s*\"(?!/ui/assets/|#)", html), "an asset from elsewhere"


def test_static_folder_is_flat_and_text() -> None:
    assert all(p.is_file() for p in STATIC.iterdir()), "the server serves a flat folder"
    assert {p.suffix for p in STATIC.iterdir()} <= {".html", ".js", ".json", ".css", ".svg", ".png", ".txt"}


@pytest.mark.parametrize(("name", "licence"), VENDORED.items())
def test_a_vendored_file_names_its_release_and_has_its_licence_beside_it(name: str, licence: str) -> None:
    head = (STATIC / name).read_text()[:600]
    assert re.search(r"Prism 1\.\d+\.\d+ .*tag v1\.\d+\.\d+, commit [0-9a-f]{40}", head), head
    assert "Permission is hereby granted" in (STATIC / licence).read_text()


def test_the_viewer_asks_prism_only_to_tokenize() -> None:
    """Prism can write HTML (highlightElement, highlight, the hooks); the viewer uses only its tokenizer."""
    uses = {use for script in SCRIPTS for use in re.findall(r"\b(?:Prism|prism)\.(\w+)", script.read_text())}
    assert uses <= {"tokenize", "languages", "js"}, uses


@pytest.mark.parametrize(
    ("name", "sample"),
    [
        ("innerHTML", "node.innerHTML = text"),
        ("eval", "eval (code)"),
        ("href/src from code", "a.href = url"),
        ("string timers", "setTimeout('run()', 1)"),
        ("setAttribute", "el.setAttribute('onclick', x)"),
    ],
)
def test_the_guard_catches_what_it_names(name: str, sample: str) -> None:
    assert re.search(FORBIDDEN_JS[name], sample)


def test_a_download_of_the_pages_own_blob_is_the_one_href_from_code() -> None:
    assert not re.search(FORBIDDEN_JS["href/src from code"], "a.href = URL.createObjectURL(new Blob([text]))")
    assert re.search(FORBIDDEN_JS["href/src from code"], "a.href = URL.createObjectURL(blobFromTheServer)")

"""The document flow, written once: every sentence of every document of a request decoded in one call ->
the sentences that hold tags aligned with their translations in one call -> each document rendered,
its translations put back into the source's layout.

The model was trained on single sentences; a paragraph handed to it whole loses sentences. So a
document (a plain text cut by aiayn.documents.segment, a page of aiayn.documents.html, a Word or
PowerPoint file of aiayn.documents.office) is its sentences to translate, the ones among them that
hold an inline tag, and a `render` that writes translations back. The CLI (`aiayn translate
--document`, `--format html / docx / pptx`) and the server (`aiayn serve`'s /translate,
/translate_file, /v1/translate with split, the web page) go through `translate`:

    docs = [segment("Ein Hund rennt. Eine Frau liest.\\n\\nZweiter Absatz.", "de")]
    done = await translate(docs, decode, align)   # decode: sentences -> their n-best, awaited
    done[0].renders[0]                            # 'A dog runs. A woman reads.\\n\\nSecond paragraph.'

The flow is a coroutine so that the server decodes through its batcher and aligns through its worker,
with other requests', without waiting on its event loop; the CLI and the library's `translate_html`,
`translate_office` and `translate_texts` hand it plain functions and run it with `translate_now`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from aiayn.data.sentence_starts import SentenceStarts
from aiayn.documents.segment import segment
from aiayn.documents.tag_placement import Links


class Document(Protocol):
    """What the flow asks of a document: its sentences, in order; the ones that hold an inline tag
    (indices into `sentences`: placed through word links when the caller can align); and its
    rendering with one translation per sentence and the links found."""

    @property
    def sentences(self) -> list[str]: ...

    @property
    def tagged(self) -> list[int]: ...

    def render(self, translations: Sequence[str], links: Mapping[int, Links]) -> Any: ...


class Scored(Protocol):
    """What the flow reads of a hypothesis: its text (the server's have a score and a piece count too)."""

    @property
    def text(self) -> str: ...


class Plain(NamedTuple):
    """A hypothesis that is only its text (a translation function's output)."""

    text: str


H = TypeVar("H", bound=Scored)
# the sentences -> each one's hypotheses, best first (at least one)
Decode = Callable[[list[str]], Awaitable[Sequence[Sequence[H]]]]
# sources, their translations -> each pair's word links (aiayn.decode.align; None: tags placed by position)
Align = Callable[[list[str], list[str]], Awaitable[Sequence[Links]]]


@dataclass(frozen=True)
class Translated(Generic[H]):
    """One document translated: its sentences' hypotheses as decoded (best first), and its renderings,
    the k-th from each sentence's k-th hypothesis (its last where it has fewer)."""

    document: Document
    hypotheses: list[Sequence[H]]
    renders: list[Any]


async def translate(
    docs: Sequence[Document], decode: Decode[H], align: Align | None = None, n_best: int = 1
) -> list[Translated[H]]:
    """Every sentence of `docs` decoded in one call of `decode`; the sentences that hold tags aligned with
    their best translations in one call of `align` (None, or a sentence it cannot link: tags are placed
    by position); each document rendered `n_best` times (more than once: plain texts only, as an HTML or
    office document renders into its own tree)."""
    sentences = [s for d in docs for s in d.sentences]
    nbest = await decode(sentences)
    if len(nbest) != len(sentences):
        raise ValueError(f"{len(nbest)} translations for {len(sentences)} sentences")
    mine, at = [], 0
    for d in docs:
        mine.append(list(nbest[at : at + len(d.sentences)]))
        at += len(d.sentences)
    best = [[h[0].text for h in hyps] for hyps in mine]
    tagged = [(k, i) for k, d in enumerate(docs) for i in d.tagged]
    links: list[dict[int, Links]] = [{} for _ in docs]
    if align is not None and tagged:
        found = await align([docs[k].sentences[i] for k, i in tagged], [best[k][i] for k, i in tagged])
        for (k, i), sentence_links in zip(tagged, found):
            links[k][i] = sentence_links
    out = []
    for d, hyps, own in zip(docs, mine, links):
        renders = [d.render([h[min(k, len(h) - 1)].text for h in hyps], own) for k in range(n_best)]
        out.append(Translated(d, hyps, renders))
    return out


def translate_now(
    docs: Sequence[Document],
    translate_fn: Callable[[list[str]], list[str]],
    align: Callable[[list[str], list[str]], Sequence[Links]] | None = None,
) -> list[Any]:
    """`translate` with plain functions (sentences -> their translations; sources, translations -> word
    links, e.g. Translator.translate and Translator.align): each document's rendering."""

    async def decode(sentences: list[str]) -> list[list[Plain]]:
        return [[Plain(t)] for t in translate_fn(sentences)] if sentences else []

    async def aligned(sources: list[str], targets: list[str]) -> Sequence[Links]:
        assert align is not None
        return align(sources, targets)

    done = run_now(translate(docs, decode, aligned if align is not None else None))
    return [t.renders[0] for t in done]


R = TypeVar("R")


def run_now(coroutine: Coroutine[Any, Any, R]) -> R:
    """The result of a coroutine that never waits (its awaits are plain functions): run here, with no
    event loop, so that a caller inside one (a notebook, a server's handler) may call it too."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the document flow waited on something: run it with await")


def translate_texts(
    texts: Sequence[str],
    lang: str,
    translate_fn: Callable[[list[str]], list[str]],
    starts: SentenceStarts | None = None,
) -> list[str]:
    """Texts (paragraphs, blank lines, any whitespace) translated sentence by sentence with one call of
    `translate_fn` (a list of sentences -> their translations), rejoined in the source's layout (`lang`:
    the source language, to cut sentences by; `starts`: aiayn.data.sentence_starts)."""
    return translate_now([segment(t, lang, starts=starts) for t in texts], translate_fn)

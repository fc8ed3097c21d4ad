"""The one object the routes of `aiayn serve` call (`Service`): the settings, the backend, the batching
worker, the metrics and the store of files, and the steps of a translation (its options, its sentences
queued, HTML parsed and rendered with its tags placed, the source language detected); and aiayn's own
request models (/v1)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lxml.etree import LxmlError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from aiayn.data.language import detect
from aiayn.decode.documents import SplitTexts, split_texts
from aiayn.decode.html import HtmlDocument, HtmlError
from aiayn.serve.batcher import Backend, Batcher, Hypothesis, Overloaded, SearchOptions
from aiayn.serve.coalesced import Coalesced
from aiayn.serve.files import Files
from aiayn.serve.http import ApiError, Requests, one_line
from aiayn.serve.metrics import Metrics

MAX_BEAM = 16
# `source: auto` refuses a text as another language only where the identifier gives the source language
# less than this share of the top language's probability: py3langid ranks short German ("Hallo", "Danke",
# "Ein Hund.", "Zwei Männer.") Italian, Danish, Faroese or Luxembourgish, with German close behind (0.5-0.97
# of the top), and those must still translate; a French, Czech or English sentence gives German < 0.02 of it
AUTO_REFUSE = 0.1
LANGUAGE_NAMES = {
    "de": "German",
    "en": "English",
    "fr": "French",
    "cs": "Czech",
    "es": "Spanish",
    "it": "Italian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ru": "Russian",
    "zh": "Chinese",
    "ja": "Japanese",
    "sk": "Slovak",
    "pl": "Polish",
    "sv": "Swedish",
    "da": "Danish",
    "fi": "Finnish",
    "hu": "Hungarian",
    "ro": "Romanian",
    "tr": "Turkish",
    "el": "Greek",
    "uk": "Ukrainian",
    "ar": "Arabic",
    "ko": "Korean",
    "lb": "Luxembourgish",
}


class V1Translate(BaseModel):
    """aiayn's own request: strict types (no "4" -> 4), unknown fields refused."""

    model_config = ConfigDict(extra="forbid")
    q: StrictStr | list[StrictStr]
    beam: StrictInt | None = Field(None, ge=1, le=MAX_BEAM)
    n_best: StrictInt = Field(1, ge=1, le=MAX_BEAM)
    length_penalty: StrictFloat | StrictInt | None = Field(None, ge=0, le=10)
    max_len_a: StrictFloat | StrictInt | None = Field(None, ge=0, le=10)
    max_len_b: StrictInt | None = Field(None, ge=0, le=1024)
    api_key: StrictStr | None = None
    # each text cut into sentences, decoded together, rejoined; the answer lists them (the web page)
    split: StrictBool = False


class V1Attention(V1Translate):
    q: StrictStr


@dataclass
class Service(Requests):
    """What the translation routers share: the settings (and the request steps of `Requests`), the
    backend, the batching worker, the metrics and the translated files; and the steps of a translation
    (its options, queueing its sentences)."""

    backend: Backend
    batcher: Batcher
    metrics: Metrics
    files: Files
    aligner: Coalesced | None = None  # word links of (source, translation) pairs, concurrent requests' together

    def __post_init__(self) -> None:
        translator = getattr(self.backend, "translator", None)  # a translation backend's (Translator.align)
        if translator is not None:

            async def align(pairs: list[tuple[str, str]]) -> list[Any]:
                sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
                return await self.batcher.run_exclusive(lambda: translator.align(sources, targets))

            self.aligner = Coalesced(align)

    def default_options(self) -> SearchOptions:
        s = self.settings
        return SearchOptions(s.beam, s.length_penalty, s.max_len_a, s.max_len_b)

    def options(self, req: V1Translate) -> SearchOptions:
        s = self.settings
        beam = req.beam if req.beam is not None else s.beam
        if req.n_best > beam:
            raise ApiError(422, f"Invalid request: n_best ({req.n_best}) must not exceed beam ({beam})")
        return SearchOptions(
            beam=beam,
            n_best=req.n_best,
            length_penalty=float(pick(req.length_penalty, s.length_penalty)),
            max_len_a=float(pick(req.max_len_a, s.max_len_a)),
            max_len_b=int(pick(req.max_len_b, s.max_len_b)),
        )

    async def run(self, texts: list[str], opts: SearchOptions) -> list:
        limit = self.settings.sentence_limit
        if limit >= 0 and len(texts) > limit:
            raise ApiError(413, f"Invalid request: request ({len(texts)} sentences) exceeds sentence limit ({limit})")
        try:
            return await self.batcher.translate(texts, opts)
        except Overloaded as e:
            raise ApiError(503, str(e)) from None

    async def run_texts(self, texts: list[str], opts: SearchOptions, split: bool) -> tuple[SplitTexts | None, list]:
        """n-best lists of the texts' translations; `split`: each text cut into sentences, all of them
        queued at once (one request: they batch together), each hypothesis k rejoined from the
        sentences' k-th (their last when a sentence has fewer) in the text's layout."""
        if not split:
            return None, await self.run(texts, opts)
        docs = split_texts(texts, self.settings.source_lang, starts=self.settings.sentence_starts)
        nbest = await self.run(docs.sentences, opts)
        per_k = [docs.join([h[min(k, len(h) - 1)][0] for h in nbest]) for k in range(opts.n_best)]
        joined = [[(per_k[k][i], math.nan, 0) for k in range(opts.n_best)] for i in range(len(texts))]
        return docs, joined

    def parse_html(self, texts: list[str]) -> list[HtmlDocument]:
        try:
            s = self.settings
            return [HtmlDocument(t, s.source_lang, s.target_lang, s.sentence_starts) for t in texts]
        except HtmlError as e:  # libxml2 stopped reading (too deep): never a 200 without the rest of the text
            raise ApiError(400, f"Invalid request: {one_line(e)}") from None
        except (ValueError, LxmlError) as e:
            raise ApiError(400, f"Invalid request: cannot parse the HTML ({one_line(e)})") from None

    async def render_html(self, pages: list[HtmlDocument], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Every sentence of every page decoded at once; the sentences that hold tags aligned with their
        translations (Translator.align, on a worker between batches, with concurrent requests'), and each
        page rendered."""
        nbest = await self.run([x for p in pages for x in p.sentences], opts)
        per_page, at = [], 0
        for p in pages:
            per_page.append([h[0][0] for h in nbest[at : at + len(p.sentences)]])
            at += len(p.sentences)
        tagged = [(k, i) for k, p in enumerate(pages) for i in p.tagged]
        links: list[dict[int, Any]] = [{} for _ in pages]
        if tagged and self.aligner is not None:
            found = await self.aligner([(pages[k].sentences[i], per_page[k][i]) for k, i in tagged])
            for (k, i), sentence_links in zip(tagged, found):
                links[k][i] = sentence_links
        return [[(p.render(mine, mine_links), math.nan, 0)] for p, mine, mine_links in zip(pages, per_page, links)]

    def detect_source(self, texts: list[str]) -> list[dict[str, Any]]:
        """`source: auto`: each text's language (aiayn.data.language); one the model does not read, when the
        identifier finds the source language far less likely (AUTO_REFUSE), is a 400 that names it. A text
        without letters has nothing to detect, and a short one ("Hallo", "Ein Hund.") is often ranked another
        language just ahead of the source's: both are read as the source language, with its probability."""
        s = self.settings
        out = []
        for text in texts:
            ranked = detect(text, top=200)
            lang, p = ranked[0]
            own = dict(ranked).get(s.source_lang, 0.0)
            if not any(c.isalpha() for c in text) or (lang != s.source_lang and own >= AUTO_REFUSE * p):
                lang, p = s.source_lang, own
            elif lang != s.source_lang:
                raise ApiError(
                    400,
                    f"detected language {LANGUAGE_NAMES.get(lang, lang)} ({lang}, confidence {100 * p:.1f}); "
                    f"this server translates {LANGUAGE_NAMES.get(s.source_lang, s.source_lang)} ({s.source_lang}) "
                    f"to {LANGUAGE_NAMES.get(s.target_lang, s.target_lang)} ({s.target_lang})",
                )
            out.append({"confidence": round(100 * p, 2), "language": lang})
        return out


def pick(value: Any, default: Any) -> Any:
    return default if value is None else value

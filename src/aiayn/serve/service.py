"""The one object the routes of `aiayn serve` call (`Service`): the settings, the engine, the batching
worker, the metrics and the store of files, and a translation's steps: its options, its documents
through aiayn.documents' one flow (their sentences queued on the batcher, the tagged ones aligned on its
worker), the source language detected; and aiayn's own request models (/v1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lxml.etree import LxmlError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from aiayn.documents.flow import Document, Translated, translate
from aiayn.documents.formats import OFFICE, document
from aiayn.documents.html import HtmlError
from aiayn.documents.language import WrongLanguage, detect, source_language
from aiayn.documents.office import OfficeError
from aiayn.documents.segment import Segmented, segment
from aiayn.serve.batcher import Batcher, Engine, Hypothesis, Overloaded, SearchOptions
from aiayn.serve.coalesced import Coalesced
from aiayn.serve.files import Files
from aiayn.serve.http import ApiError, Requests, one_line
from aiayn.serve.metrics import Metrics

MAX_BEAM = 16


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
    engine, the batching worker, the metrics and the translated files; and the steps of a translation."""

    engine: Engine
    batcher: Batcher
    metrics: Metrics
    files: Files
    aligner: Coalesced = field(init=False)  # word links of (source, translation) pairs, concurrent requests' together

    def __post_init__(self) -> None:
        engine = self.engine

        async def align(pairs: list[tuple[str, str]]) -> list[Any]:
            sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
            return await self.batcher.run_exclusive(lambda: engine.align(sources, targets))

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

    async def run(self, texts: list[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        """The texts' n-best lists, each text handed to the model whole (queued on the batcher)."""
        limit = self.settings.sentence_limit
        if limit >= 0 and len(texts) > limit:
            raise ApiError(413, f"Invalid request: request ({len(texts)} sentences) exceeds sentence limit ({limit})")
        try:
            return await self.batcher.translate(texts, opts)
        except Overloaded as e:
            raise ApiError(503, str(e)) from None

    async def translate_documents(
        self, docs: list[Document], opts: SearchOptions, n_best: int = 1
    ) -> list[Translated[Hypothesis]]:
        """The documents through aiayn.documents' flow: every sentence of all of them queued at once (one
        request: they batch together), the ones that hold tags aligned on the worker between batches with
        concurrent requests' (`aligner`), each rendered (`n_best` times: plain texts)."""

        async def align(sources: list[str], targets: list[str]) -> list[Any]:
            return await self.aligner(list(zip(sources, targets)))

        return await translate(docs, lambda sentences: self.run(sentences, opts), align, n_best)

    def read(self, source: str | bytes, fmt: str, ext: str = "") -> Document:
        """`source` as a document of format `fmt` (aiayn.documents.formats) in the server's languages; what
        cannot be read is a 400 (`ext`: the upload's suffix, named in an office file's)."""
        s = self.settings
        try:
            return document(source, fmt, s.source_lang, s.target_lang, s.sentence_starts)
        except HtmlError as e:  # libxml2 stopped reading (too deep): never a 200 without the rest of the text
            raise ApiError(400, f"Invalid request: {one_line(e)}") from None
        except (ValueError, LxmlError) as e:
            if fmt in OFFICE and isinstance(e, OfficeError | LxmlError):
                raise ApiError(400, f"Invalid request: cannot read the {ext} ({one_line(e)})") from None
            if fmt == "html":
                raise ApiError(400, f"Invalid request: cannot parse the HTML ({one_line(e)})") from None
            raise

    async def translate_texts(
        self, texts: list[str], fmt: str, auto: bool, alternatives: int
    ) -> tuple[list[str], list[list[str]], list[dict[str, Any]] | None]:
        """LibreTranslate's /translate: each text's translation, its `alternatives` others (text only) and,
        `auto`, its detected language. Plain text is cut into sentences unless the server says not to
        (--no-split-sentences); each alternative k is rejoined from the sentences' k-th hypotheses."""
        s = self.settings
        if fmt == "html":
            if alternatives:
                raise ApiError(400, "Invalid request: alternatives are not supported with format html")
            pages = [self.read(t, "html") for t in texts]
            detected = self.detect_source([" ".join(p.sentences) for p in pages]) if auto else None
            done = await self.translate_documents(pages, self.default_options())
            return [d.renders[0] for d in done], [[] for _ in done], detected
        detected = self.detect_source(texts) if auto else None
        beam = max(s.beam, alternatives + 1)
        opts = SearchOptions(beam, s.length_penalty, s.max_len_a, s.max_len_b, n_best=alternatives + 1)
        if s.split_sentences:
            done = await self.translate_documents([self.read(t, "text") for t in texts], opts, opts.n_best)
            outs = [d.renders for d in done]
        else:
            outs = [[h.text for h in hyps] for hyps in await self.run(texts, opts)]
        return [o[0] for o in outs], [o[1:] for o in outs], detected

    async def translate_split(
        self, texts: list[str], opts: SearchOptions
    ) -> list[tuple[Segmented, Translated[Hypothesis]]]:
        """/v1/translate with split: each text cut into sentences, all of them decoded at once, rejoined."""
        s = self.settings
        docs = [segment(t, s.source_lang, starts=s.sentence_starts) for t in texts]
        return list(zip(docs, await self.translate_documents(list(docs), opts)))

    async def translate_file(self, data: bytes, fmt: str, ext: str, auto: bool) -> bytes:
        """LibreTranslate's /translate_file: an upload of format `fmt` (suffix `ext`) translated whole."""
        opts = self.default_options()
        if fmt in OFFICE:
            doc = self.read(data, fmt, ext)
            text = " ".join(doc.sentences)
            self.check_limits([text])
            if auto:
                self.detect_source([text])
            try:
                return (await self.translate_documents([doc], opts))[0].renders[0]
            except OfficeError as e:  # a picture or another part that cannot be unpacked
                raise ApiError(400, f"Invalid request: cannot read the {ext} ({one_line(e)})") from None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: the file is not UTF-8 text") from None
        self.check_limits([text])
        if fmt == "html":
            page = self.read(text, "html")
            if auto:
                self.detect_source([" ".join(page.sentences)])
            return (await self.translate_documents([page], opts))[0].renders[0].encode("utf-8")
        if auto:
            self.detect_source([text])
        if not self.settings.split_sentences:
            return (await self.run([text], opts))[0][0].text.encode("utf-8")
        return (await self.translate_documents([self.read(text, "text")], opts))[0].renders[0].encode("utf-8")

    async def attention(self, sentence: str, opts: SearchOptions) -> dict[str, Any]:
        """The engine's attention map of the sentence's translation (the web page), on the worker between
        batches; 501 from an engine that reports none."""
        engine = self.engine
        found = await self.batcher.run_exclusive(lambda: engine.attention(sentence, opts))
        if found is None:
            raise ApiError(501, f"the {engine.name} backend does not report attention")
        return found

    def detect_languages(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        """LibreTranslate's /detect: per text, its three likeliest languages, best first."""
        return [[{"confidence": round(100 * p, 2), "language": lang} for lang, p in detect(t)] for t in texts]

    def detect_source(self, texts: list[str]) -> list[dict[str, Any]]:
        """`source: auto`: each text's language (aiayn.documents.language.source_language); a text the model
        does not read is a 400 that names its language."""
        s = self.settings
        out = []
        for text in texts:
            try:
                lang, p = source_language(text, s.source_lang, s.target_lang)
            except WrongLanguage as e:
                raise ApiError(400, str(e)) from None
            out.append({"confidence": round(100 * p, 2), "language": lang})
        return out


def pick(value: Any, default: Any) -> Any:
    return default if value is None else value

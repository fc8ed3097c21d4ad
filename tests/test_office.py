"""Office documents (aiayn.documents.office): written with python-docx and python-pptx, translated, read
back with them."""

from __future__ import annotations

import io
import zipfile

import pytest

docx = pytest.importorskip("docx")  # python-docx: the test extra

from docx.oxml import OxmlElement  # noqa: E402
from docx.oxml.ns import qn  # noqa: E402

LINK = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink"


def _field(paragraph, code: str, shown: str) -> None:
    """A complex field (fldChar begin, instruction, separate, its shown text, end), as Word writes one."""
    for kind, text in (("begin", None), ("instr", code), ("separate", None), ("text", shown), ("end", None)):
        run = OxmlElement("w:r")
        if kind == "instr":
            el = OxmlElement("w:instrText")
            el.text = text
        elif kind == "text":
            el = OxmlElement("w:t")
            el.text = text
        else:
            el = OxmlElement("w:fldChar")
            el.set(qn("w:fldCharType"), kind)
        run.append(el)
        paragraph._p.append(run)


def _document() -> bytes:
    d = docx.Document()
    d.add_heading("Ein Titel", level=1)
    p = d.add_paragraph("Ein Mann fährt ")
    p.add_run("Fahrrad").bold = True
    p.add_run(". Zwei Kinder spielen.")
    p = d.add_paragraph("Erste Zeile")
    run = p.add_run()
    run.add_break()  # Shift+Enter: a line break, which ends a sentence
    run.add_text("zweite Zeile")
    p.add_run().add_tab()  # a tab, which does not
    p.add_run("nach dem Tab.")
    p = d.add_paragraph("Siehe ")
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), p.part.relate_to("https://example.org/", LINK, is_external=True))
    inner = OxmlElement("w:r")
    style = OxmlElement("w:rStyle")  # the link's own formatting, as Word writes it
    style.set(qn("w:val"), "Hyperlink")
    inner.append(OxmlElement("w:rPr"))
    inner[0].append(style)
    t = OxmlElement("w:t")
    t.text = "die Seite"
    inner.append(t)
    link.append(inner)
    p._p.append(link)
    p.add_run(" hier.")
    table = d.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Ein Hund."
    table.cell(0, 1).text = "Eine Katze."
    d.sections[0].header.paragraphs[0].text = "Kopfzeile hier."
    footer = d.sections[0].footer.paragraphs[0]
    footer.text = "Seite "
    _field(footer, " PAGE ", "1")
    d.add_paragraph("")
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _upper(sentences: list[str]) -> list[str]:
    return [f"[{s.upper()}]" for s in sentences]


def _reverse(sentences: list[str]) -> list[str]:
    return [" ".join(reversed(s.upper().split())) for s in sentences]


def _reversed_links(sources: list[str], targets: list[str]) -> list:
    return [[frozenset({len(x.split()) - 1 - i}) for i in range(len(x.split()))] for x in sources]


def test_a_docx_is_translated_paragraph_by_paragraph_with_its_formatting() -> None:
    from aiayn.documents.office import translate_office

    data = _document()
    calls: list[list[str]] = []
    out = translate_office(data, "docx", "de", lambda s: calls.append(s) or _upper(s))
    assert len(calls) == 1  # every sentence of every part in one call
    d = docx.Document(io.BytesIO(out))
    texts = [p.text for p in d.paragraphs]
    assert texts[:5] == [
        "[EIN TITEL]",
        "[EIN MANN FÄHRT FAHRRAD.] [ZWEI KINDER SPIELEN.]",
        # the break and the tab where the model read a space; the line break ends a sentence, the tab not
        "[ERSTE ZEILE]\n[ZWEITE ZEILE\tNACH DEM TAB.]",
        "[SIEHE DIE SEITE HIER.]",
        "",
    ]
    assert d.paragraphs[0].style.name == "Heading 1"  # paragraph properties kept
    bold = [r.text for r in d.paragraphs[1].runs if r.bold]
    assert bold == ["FAHRRAD"]  # by position here: no links given
    assert [c.text for c in d.tables[0].rows[0].cells] == ["[EIN HUND.]", "[EINE KATZE.]"]
    assert d.sections[0].header.paragraphs[0].text == "[KOPFZEILE HIER.]"
    link = d.paragraphs[3]._p.find(qn("w:hyperlink"))
    assert link is not None and "".join(t.text for t in link.iter(qn("w:t"))) == "DIE SEITE"
    # the link's runs keep the link's own formatting (Word's Hyperlink style), not the paragraph's
    styles = [r.find(f"{qn('w:rPr')}/{qn('w:rStyle')}") for r in link.iter(qn("w:r"))]
    assert [s is not None and s.get(qn("w:val")) for s in styles] == ["Hyperlink"]
    assert d.part.rels[link.get(qn("r:id"))].target_ref == "https://example.org/"
    # a field is kept whole and untranslated: its instruction and its shown text, in order
    footer = d.sections[0].footer.paragraphs[0]._p
    kinds = [
        el.get(qn("w:fldCharType")) or el.text for el in footer.iter(qn("w:fldChar"), qn("w:instrText"), qn("w:t"))
    ]
    assert kinds == ["[SEITE] ", "begin", " PAGE ", "separate", "1", "end"]
    # every part but the text parts is copied byte for byte
    before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(out))
    assert before.namelist() == after.namelist()
    changed = {n for n in before.namelist() if before.read(n) != after.read(n)}
    assert changed == {"word/document.xml", "word/header1.xml", "word/footer1.xml"}


def test_a_field_end_without_its_begin_leaves_the_rest_translated() -> None:
    """A field's end with no begin before it (a document pasted together) is a point like any field run;
    what follows, in its paragraph and the next, is text again (a field count below zero made all of it
    points, left untranslated without a word)."""
    from aiayn.documents.office import translate_office

    d = docx.Document()
    p = d.add_paragraph("Ein Hund rennt.")
    run, end = OxmlElement("w:r"), OxmlElement("w:fldChar")
    end.set(qn("w:fldCharType"), "end")
    run.append(end)
    p._p.append(run)
    p.add_run(" Zwei Kinder spielen.")
    d.add_paragraph("Eine Katze schläft.")
    buf = io.BytesIO()
    d.save(buf)
    out = docx.Document(io.BytesIO(translate_office(buf.getvalue(), "docx", "de", _upper)))
    assert [p.text for p in out.paragraphs] == ["[EIN HUND RENNT.] [ZWEI KINDER SPIELEN.]", "[EINE KATZE SCHLÄFT.]"]
    assert len(out.paragraphs[0]._p.findall(f"{qn('w:r')}/{qn('w:fldChar')}")) == 1  # the field run kept


def test_the_stand_in_is_never_html_text(monkeypatch) -> None:
    """Issue #68: the paragraphs' stand-in is built as an lxml tree, filled in place and read back into
    runs; no HTML is written out and parsed (the round trip), so lxml's HTML parser is never called."""
    from lxml import html as lxml_html

    from aiayn.documents.office import OfficeDocument

    def refuse(*args, **kwargs):
        raise AssertionError("an HTML parse")

    for name in ("fromstring", "fragment_fromstring", "document_fromstring", "fragments_fromstring"):
        monkeypatch.setattr(lxml_html, name, refuse)
    doc = OfficeDocument(_document(), "docx", "de", "en")
    assert doc.sentences[:3] == ["Ein Titel", "Ein Mann fährt Fahrrad.", "Zwei Kinder spielen."]
    out = doc.render(_upper(doc.sentences), {})
    paragraphs = docx.Document(io.BytesIO(out)).paragraphs
    assert paragraphs[1].text == "[EIN MANN FÄHRT FAHRRAD.] [ZWEI KINDER SPIELEN.]"


def test_formatting_follows_the_word_links() -> None:
    """The bold run goes where its word's translation is, as an inline HTML tag does."""
    from aiayn.documents.office import translate_office

    out = translate_office(_document(), "docx", "de", _reverse, _reversed_links)
    p = docx.Document(io.BytesIO(out)).paragraphs[1]
    assert p.text == "FAHRRAD. FÄHRT MANN EIN SPIELEN. KINDER ZWEI"
    assert [(r.text, r.bold) for r in p.runs][:2] == [
        ("FAHRRAD", True),
        (". FÄHRT MANN EIN SPIELEN. KINDER ZWEI", None),
    ]
    by_position = translate_office(_document(), "docx", "de", _reverse)
    assert [r.text for r in docx.Document(io.BytesIO(by_position)).paragraphs[1].runs if r.bold] != ["FAHRRAD"]
    # two formatted runs the translation puts the other way round: each keeps its own formatting
    d = docx.Document()
    p = d.add_paragraph("Ein ")
    p.add_run("Mann").bold = True
    p.add_run(" fährt ")
    p.add_run("Fahrrad").italic = True
    p.add_run(".")
    buf = io.BytesIO()
    d.save(buf)
    out = translate_office(buf.getvalue(), "docx", "de", _reverse, _reversed_links)
    runs = docx.Document(io.BytesIO(out)).paragraphs[0].runs
    assert [(r.text, r.bold, r.italic) for r in runs] == [
        ("FAHRRAD", None, True),
        (". FÄHRT ", None, None),
        ("MANN", True, None),
        (" EIN", None, None),
    ]


def test_language_marks_of_the_source_name_the_target() -> None:
    """Word spell-checks a run in the language its w:lang (or the styles' default) names: after the
    translation the German marks say English, with English's default region; other languages' marks,
    and every mark when no target is given, stay."""
    from aiayn.documents.office import office_language, translate_office

    d = docx.Document(io.BytesIO(_document()))
    default = d.styles.element.find(f"{qn('w:docDefaults')}/{qn('w:rPrDefault')}/{qn('w:rPr')}/{qn('w:lang')}")
    default.set(qn("w:val"), "de-DE")
    default.set(qn("w:eastAsia"), "zh-CN")
    run = d.paragraphs[1].runs[1]  # the bold "Fahrrad"
    run.font.bold = True
    lang = OxmlElement("w:lang")
    lang.set(qn("w:val"), "de-AT")
    run._r.get_or_add_rPr().append(lang)
    buf = io.BytesIO()
    d.save(buf)
    data = buf.getvalue()

    out = docx.Document(io.BytesIO(translate_office(data, "docx", "de", _upper, target="en")))
    default = out.styles.element.find(f"{qn('w:docDefaults')}/{qn('w:rPrDefault')}/{qn('w:rPr')}/{qn('w:lang')}")
    assert (default.get(qn("w:val")), default.get(qn("w:eastAsia"))) == ("en-US", "zh-CN")
    bold = [r for r in out.paragraphs[1].runs if r.bold]
    assert [r._r.rPr.find(qn("w:lang")).get(qn("w:val")) for r in bold] == ["en-US"]
    unchanged = translate_office(data, "docx", "de", _upper)
    before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(unchanged))
    assert before.read("word/styles.xml") == after.read("word/styles.xml")
    assert b'w:val="de-AT"' in after.read("word/document.xml")
    # a styles part that cannot be read is copied as it is: only its language marks were wanted
    source = zipfile.ZipFile(io.BytesIO(data))
    broken = io.BytesIO()
    with zipfile.ZipFile(broken, "w") as z:
        for info in source.infolist():
            z.writestr(info, b"<w:styles" if info.filename == "word/styles.xml" else source.read(info.filename))
    out = zipfile.ZipFile(io.BytesIO(translate_office(broken.getvalue(), "docx", "de", _upper, target="en")))
    assert out.read("word/styles.xml") == b"<w:styles" and b"[EIN TITEL]" in out.read("word/document.xml")
    assert (office_language("en"), office_language("fr"), office_language("de-AT"), office_language("pt_BR")) == (
        "en-US",
        "fr-FR",
        "de-AT",
        "pt-BR",
    )
    assert office_language("ar") == "ar" and office_language("qq") == "qq"  # no region known: none made up


def test_characters_xml_cannot_hold_are_replaced_in_the_translation() -> None:
    """A translation with control characters (XML 1.0 has no place for them) is written, not a crash:
    U+FFFD as an HTML5 parser reads them, a space for those that are spaces (the words stay the same)."""
    from aiayn.documents.html import translate_html
    from aiayn.documents.office import translate_office

    out = translate_office(_document(), "docx", "de", lambda s: [x + "\x01\x0b!" for x in s])
    assert docx.Document(io.BytesIO(out)).paragraphs[0].text == "Ein Titel\ufffd !"
    assert (
        translate_html("<p>Ein <b>Hund</b>.</p>", "de", lambda s: ["\x02A \x1fdog."]) == "<p>\ufffdA  <b>dog</b>.</p>"
    )


def test_what_is_not_a_docx_is_refused_by_name(monkeypatch) -> None:
    from aiayn.documents import office as word

    with pytest.raises(word.OfficeError, match="not a .docx"):
        word.OfficeDocument(b"plain text", "docx", "de")
    empty = io.BytesIO()
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(word.OfficeError, match="no word/document.xml"):
        word.OfficeDocument(empty.getvalue(), "docx", "de")
    broken = io.BytesIO()
    with zipfile.ZipFile(broken, "w") as z:
        z.writestr("word/document.xml", "<w:document")
    with pytest.raises(word.OfficeError, match="word/document.xml cannot be read"):
        word.OfficeDocument(broken.getvalue(), "docx", "de")
    monkeypatch.setattr(word, "MAX_XML_BYTES", 1000)  # what a small zip would unpack to
    with pytest.raises(word.OfficeError, match="unpack to over"):
        word.OfficeDocument(_document(), "docx", "de")


def test_a_small_zip_that_unpacks_to_over_the_limit_is_refused_before_it_is_read() -> None:
    """A .docx with a 300 MiB picture of zeros packs into about 1 MiB: what counts is what its parts
    unpack to, each entry's stated size, not what they are packed in (checked before anything is read)."""
    from aiayn.documents import office

    buf = io.BytesIO(_document())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("word/media/image1.png", "w", force_zip64=True) as f:
            for _ in range(75):
                f.write(bytes(4 << 20))
    assert len(buf.getvalue()) < 2 << 20
    with pytest.raises(office.OfficeError, match="the document unpacks to over 256 MiB"):
        office.OfficeDocument(buf.getvalue(), "docx", "de")


def _nested(data: bytes, part: str, tags: list[str], times: int, inner: bytes) -> bytes:
    """The office file `data` with the elements `tags`, each inside the one before, nested `times` over
    around `inner`, at the end of `part`'s root element's last child (the body, the slide's content)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in source.infolist():
            xml = source.read(info.filename)
            if info.filename == part:
                at = xml.rindex(b"</", 0, xml.rindex(b"</"))  # where the root's last child closes
                opening = "".join(f"<{t}>" for t in tags).encode() * times
                closing = "".join(f"</{t}>" for t in reversed(tags)).encode() * times
                xml = xml[:at] + opening + inner + closing + xml[at:]
            z.writestr(info, xml)
    return out.getvalue()


def test_xml_nested_past_the_parsers_depth_is_refused_never_emptied() -> None:
    """Issue #66: libxml2 reads elements up to 256 levels deep. Its XML parser stops there with an error
    (the HTML parser returned what it had read): a .docx or .pptx part nested deeper is refused, saying
    which part, where and why, never translated without the rest of its text. One level less is read
    and translated whole."""
    pptx = pytest.importorskip("pptx")
    from aiayn.documents.office import OfficeDocument, OfficeError, translate_office

    paragraph = b"<w:p><w:r><w:t>Ein Hund rennt.</w:t></w:r></w:p>"  # document, body, 2 x 125, p, r, t: 255
    deepest = _nested(_document(), "word/document.xml", ["w:sdt", "w:sdtContent"], 125, paragraph)
    out = zipfile.ZipFile(io.BytesIO(translate_office(deepest, "docx", "de", _upper)))
    assert b"[EIN HUND RENNT.]" in out.read("word/document.xml")
    too_deep = _nested(_document(), "word/document.xml", ["w:sdt", "w:sdtContent"], 126, paragraph)
    with pytest.raises(
        OfficeError, match=r"^word/document.xml cannot be read past line 2, column \d+ \(Excessive depth"
    ):
        OfficeDocument(too_deep, "docx", "de")
    prs = pptx.Presentation()
    prs.slides.add_slide(prs.slide_layouts[1]).shapes.title.text = "Ein Titel"
    buf = io.BytesIO()
    prs.save(buf)
    too_deep = _nested(buf.getvalue(), "ppt/slides/slide1.xml", ["p:grpSp"], 260, b"")
    with pytest.raises(OfficeError, match=r"^ppt/slides/slide1.xml cannot be read past .* \(Excessive depth"):
        OfficeDocument(too_deep, "pptx", "de")


def test_a_pptx_is_translated_with_its_runs_breaks_and_slide_numbers() -> None:
    """PowerPoint: slides and notes; a bold run follows its word's links; a line break (a:br, between
    runs) stands where the model read a space; a slide-number field is kept; each paragraph's end
    formatting (a:endParaRPr) stays last, where the schema wants it."""
    pptx = pytest.importorskip("pptx")
    from lxml import etree

    from aiayn.documents.office import A, translate_office

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Ein Titel"
    frame = slide.placeholders[1].text_frame
    frame.text = "Ein Mann fährt "
    p = frame.paragraphs[0]
    run = p.add_run()
    run.text = "Fahrrad"
    run.font.bold = True
    p.add_run().text = "."
    p._p.append(etree.SubElement(p._p, f"{{{A}}}endParaRPr", lang="de-DE"))
    p2 = frame.add_paragraph()
    p2.text = "Erste Zeile\vzweite Zeile."  # python-pptx writes \v as <a:br>
    field = etree.SubElement(p2._p, f"{{{A}}}fld", id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum")
    etree.SubElement(field, f"{{{A}}}t").text = "1"
    slide.notes_slide.notes_text_frame.text = "Eine Notiz."
    buf = io.BytesIO()
    prs.save(buf)
    data = buf.getvalue()

    out = translate_office(data, "pptx", "de", _reverse, _reversed_links)
    got = pptx.Presentation(io.BytesIO(out)).slides[0]
    assert got.shapes.title.text == "TITEL EIN"
    first, second = got.placeholders[1].text_frame.paragraphs
    assert [(r.text, r.font.bold) for r in first.runs] == [("FAHRRAD", True), (". FÄHRT MANN EIN", None)]
    assert first._p[-1].tag == f"{{{A}}}endParaRPr"
    assert [c.tag.split("}")[1] for c in second._p] == ["r", "br", "r", "fld"]
    # the break ends the first line's sentence: each line reversed on its own side of it
    assert "".join(t.text for t in second._p.iter(f"{{{A}}}t")) == "ZEILE ERSTEZEILE. ZWEITE1"
    assert got.notes_slide.notes_text_frame.text == "NOTIZ. EINE"
    assert first._p[-1].get("lang") == "de-DE"  # no target given: the marks as they were
    retagged = pptx.Presentation(io.BytesIO(translate_office(data, "pptx", "de", _upper, target="en")))
    assert retagged.slides[0].placeholders[1].text_frame.paragraphs[0]._p[-1].get("lang") == "en-US"
    before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(out))
    changed = {n for n in before.namelist() if before.read(n) != after.read(n)}
    assert changed == {"ppt/slides/slide1.xml", "ppt/notesSlides/notesSlide1.xml"}
    with pytest.raises(ValueError, match="no ppt/presentation.xml"):
        translate_office(_document(), "pptx", "de", _upper)

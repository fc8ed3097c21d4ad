"""Documents: what users bring to translate (plain text, HTML pages, Word and PowerPoint files), translated
whole, in the source's layout. `aiayn translate --document / --format` and `aiayn serve` both call it.

    segment.py        a text -> its sentences and the exact whitespace between them (sentencex)
    language.py       which language a text is in (py3langid); what a language tag names
    flow.py           the one flow: every sentence decoded in one call, the tagged ones aligned, rendered
    html.py           HTML: each block's text translated, its inline markup put back (lxml)
    tag_placement.py  where a run's inline elements go in its translation
    office.py         .docx and .pptx: each paragraph as a stand-in HTML paragraph, its runs written anew
    formats.py        the formats by file name, and the document each is read into

The package calls aiayn.decode (through the functions it is handed: a Translator's, or the server's
batcher); decode never imports it.
"""

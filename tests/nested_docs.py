"""Documents nested past libxml2's depth (256), for the tests that they are refused, never emptied."""

from __future__ import annotations

import io

DEEP_HTML = "<p>Ein " + "<span>" * 254 + "Hund" + "</span>" * 254 + " rennt.</p>"


def deep_docx(last: str, first: str | None = None) -> bytes:
    """A .docx whose paragraph `last` sits inside 130 content controls (260 elements deep), after an
    ordinary paragraph `first` when given."""
    import docx
    from docx.oxml import OxmlElement

    d = docx.Document()
    if first is not None:
        d.add_paragraph(first)
    inside = d.element.body
    for _ in range(130):  # content controls in content controls
        sdt, content = OxmlElement("w:sdt"), OxmlElement("w:sdtContent")
        sdt.append(content)
        inside.append(sdt)
        inside = content
    inside.append(d.add_paragraph(last)._p)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()

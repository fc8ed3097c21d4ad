"""The language of what users bring: which language a text is in (py3langid, through aiayn.data.language)
and what a language tag names.

    detect("Ein Hund rennt über die Wiese.")   # [("de", 0.99...), ("nl", ...), ("en", ...)]
    source_language("Hallo", "de", "en")       # ("de", p): read as the source language (see AUTO_REFUSE)
    same_language("de-AT", "de")               # True: an HTML lang or an office document's language mark

Confidences are the model's normalised probabilities (0..1; the server reports them x 100, as
LibreTranslate does).
"""

from __future__ import annotations

from aiayn.data.language import identifier

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


def detect(text: str, top: int = 3) -> list[tuple[str, float]]:
    """The `top` most likely languages of `text` (ISO 639-1 codes), best first, with probabilities."""
    ranked = identifier().rank(text)
    return [(lang, float(p)) for lang, p in ranked[:top]]


class WrongLanguage(ValueError):
    """A text in a language other than the one the model reads (`source_language`)."""


def named(lang: str) -> str:
    """A language code's English name ("de" -> "German"), the code itself for one not listed."""
    return LANGUAGE_NAMES.get(lang, lang)


def source_language(text: str, source: str, target: str) -> tuple[str, float]:
    """`source: auto`: the language of `text` and its probability, for a model that translates `source`
    to `target`. A text the identifier finds far less likely in `source` than in another language
    (AUTO_REFUSE) raises WrongLanguage, which names both. A text without letters has nothing to detect,
    and a short one ("Hallo", "Ein Hund.") is often ranked another language just ahead of the source's:
    both are read as the source language, with its probability."""
    ranked = detect(text, top=200)
    lang, p = ranked[0]
    own = dict(ranked).get(source, 0.0)
    if not any(c.isalpha() for c in text) or (lang != source and own >= AUTO_REFUSE * p):
        return source, own
    if lang != source:
        raise WrongLanguage(
            f"detected language {named(lang)} ({lang}, confidence {100 * p:.1f}); "
            f"this server translates {named(source)} ({source}) to {named(target)} ({target})"
        )
    return lang, p


def primary(tag: str) -> str:
    """A language tag's language: "de" of BCP 47 "de-AT" or POSIX "de_AT"."""
    return tag.strip().replace("_", "-").split("-")[0].lower()


def same_language(tag: str, lang: str) -> bool:
    """Whether the language tag `tag` is of the language `lang`."""
    p = primary(tag)
    return bool(p) and p == primary(lang)

"""Which language a text is in: py3langid (langid.py's model of 97 languages, shipped inside the
package: nothing to download), for `aiayn serve`'s /detect and `source: "auto"` (issue #47).

    detect("Ein Hund rennt über die Wiese.")   # [("de", 0.99...), ("nl", ...), ("en", ...)]

Confidences are the model's normalised probabilities (0..1; the server reports them x 100, as
LibreTranslate does). The identifier loads once per process (about 0.3 s) on first use.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_identifier: Any = None


def _model() -> Any:
    global _identifier
    with _lock:  # the server detects on its event loop and tests from threads: load once
        if _identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _identifier


def detect(text: str, top: int = 3) -> list[tuple[str, float]]:
    """The `top` most likely languages of `text` (ISO 639-1 codes), best first, with probabilities."""
    ranked = _model().rank(text)
    return [(lang, float(p)) for lang, p in ranked[:top]]

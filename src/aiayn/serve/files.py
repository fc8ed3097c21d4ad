"""The store of translated files (LibreTranslate's /translate_file and /download_file): bounded by count,
bytes and age, in memory."""

from __future__ import annotations

import time
from pathlib import Path

MEDIA_TYPES = {  # by format (aiayn.documents.formats)
    "text": "text/plain; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
MAX_FILES = 256  # translated files kept for /download_file: memory stays bounded, by count and by size
MAX_FILE_BYTES = 64 << 20
FILE_TTL_S = 3600.0


class Files:
    """Translated files by name, the newest MAX_FILES holding at most `max_bytes` together, each for
    FILE_TTL_S (LibreTranslate keeps them in a temporary directory for a while as well)."""

    def __init__(self, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.items: dict[str, tuple[float, bytes]] = {}
        self.max_bytes = max_bytes
        self.bytes = 0

    def put(self, name: str, data: bytes) -> bool:
        """Keep `data` under `name`, dropping the oldest as needed; False: it alone is over the budget."""
        if len(data) > self.max_bytes:
            return False
        now = time.monotonic()
        for k in [k for k, v in self.items.items() if now - v[0] >= FILE_TTL_S]:
            self._drop(k)
        while self.items and (len(self.items) >= MAX_FILES or self.bytes + len(data) > self.max_bytes):
            self._drop(next(iter(self.items)))  # the oldest: dicts keep insertion order
        self.items[name] = (now, data)
        self.bytes += len(data)
        return True

    def _drop(self, name: str) -> None:
        self.bytes -= len(self.items.pop(name)[1])

    def get(self, name: str) -> bytes | None:
        item = self.items.get(name)
        return item[1] if item is not None and time.monotonic() - item[0] < FILE_TTL_S else None


def safe_name(filename: str) -> str:
    """The upload's base name with only ASCII letters, digits, '.', '-' and '_' (it goes into a URL)."""
    base = Path(filename.replace("\\", "/")).name
    return "".join(c if (c.isascii() and c.isalnum()) or c in ".-_" else "_" for c in base)[-100:] or "file.txt"

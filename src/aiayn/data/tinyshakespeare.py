"""Tiny Shakespeare: the 1.1 MB character corpus of char-rnn and nanoGPT's character-level recipes.

Found in `data.data_dir` (the file, or a directory holding input.txt), else $AIAYN_TINYSHAKESPEARE
(likewise), else the cache $AIAYN_HOME/tinyshakespeare/input.txt, else downloaded there from char-rnn's
repository and checked against its sha256.
"""

from __future__ import annotations

import os
from pathlib import Path

from aiayn.data.download import aiayn_home, download
from aiayn.data.errors import DataError

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def locate(data_dir: str | os.PathLike | None = None, download_ok: bool = True, url: str | None = None) -> Path:
    """The path of input.txt: the given place, the environment's, the cache, or a fresh download."""
    given = data_dir or os.environ.get("AIAYN_TINYSHAKESPEARE")
    if given:
        path = Path(given)
        path = path / "input.txt" if path.is_dir() else path
        if not path.is_file():
            raise DataError(f"tinyshakespeare: {path} not found")
        return path
    cached = aiayn_home() / "tinyshakespeare" / "input.txt"
    if cached.is_file():
        return cached
    if not download_ok:
        raise DataError(f"tinyshakespeare not found in {cached}; set AIAYN_TINYSHAKESPEARE or data.data_dir")
    return download(
        url or os.environ.get("AIAYN_TINYSHAKESPEARE_URL") or URL,
        cached,
        SHA256,
        hint="; offline: set AIAYN_TINYSHAKESPEARE to a copy of input.txt",
    )

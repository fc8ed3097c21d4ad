"""Models on the Hugging Face Hub: `hf://user/model` (or `hf://user/model@REVISION`) -> a local run directory.

`resolve_run` is the one place a Hub path becomes a directory; every command and `Translator.load`
call it where a run path enters, and then read the directory exactly as a run directory (its
`model.safetensors`, `spm.model`, `config.yaml`; see aiayn.checkpoint.resolve_weights). The files
come with `huggingface_hub.snapshot_download`: kept in the Hugging Face cache (HF_HOME), pinned to a
revision when one is given (a branch, tag or commit), read from the cache alone with HF_HUB_OFFLINE=1,
and from another Hub-compatible server with HF_ENDPOINT. `aiayn push` (aiayn.publish) writes them.

huggingface_hub is an optional dependency (`pip install "aiayn[hub]"`), imported only here and there.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from aiayn.checkpoint import HUB_WEIGHTS, CheckpointError, read_metadata
from aiayn.errors import AiaynError

PREFIX = "hf://"
# What a model repository holds for us (README.md: the model card; ctranslate2/: `aiayn push --ctranslate2`)
REPO_FILES = (HUB_WEIGHTS, "spm.model", "config.yaml", "README.md", "ctranslate2/*")
INSTALL_HINT = 'pip install "aiayn[hub]"'


class HubError(AiaynError):
    """A Hub path that names no aiayn model, or a download or upload that failed."""


def is_hub_path(path: str | os.PathLike) -> bool:
    return isinstance(path, str) and path.startswith(PREFIX)


def parse_hub_path(path: str) -> tuple[str, str | None]:
    """`hf://user/model@rev` -> ("user/model", "rev"); no `@`: revision None (the default branch)."""
    repo_id, _, revision = path[len(PREFIX) :].partition("@")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or (revision == "" and "@" in path):
        raise HubError(f"not a Hub model path: {path!r} (expected hf://user/model or hf://user/model@REVISION)")
    return repo_id, revision or None


def import_huggingface_hub(what: str = "an hf:// model path") -> ModuleType:
    """huggingface_hub, or one line saying how to install it."""
    try:
        import huggingface_hub
    except ImportError:
        raise HubError(f"huggingface_hub is not installed ({what} needs it): {INSTALL_HINT}") from None
    return huggingface_hub


def endpoint() -> str | None:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, when first imported); None: the Hub's."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or None


def offline() -> bool:
    """HF_HUB_OFFLINE=1 as it is now, or as huggingface_hub read it when imported."""
    from huggingface_hub import constants

    now = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    return now or constants.is_offline_mode()


def cache_dir() -> str | None:
    """The Hugging Face cache as HF_HUB_CACHE / HF_HOME say now; None: huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def download(repo_id: str, revision: str | None = None) -> Path:
    """The repository's model files at `revision` in the Hugging Face cache (downloaded if needed; with
    HF_HUB_OFFLINE=1 from the cache alone)."""
    hub = import_huggingface_hub()
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    where = f"{repo_id}@{revision}" if revision else repo_id
    try:
        local = hub.snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=list(REPO_FILES),
            endpoint=endpoint(),
            cache_dir=cache_dir(),
            local_files_only=offline(),
        )
        return Path(local)
    except (HfHubHTTPError, EntryNotFoundError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HubError(f"cannot download hf://{where}: {first}") from None


def resolve_run(path: str | os.PathLike) -> str | os.PathLike:
    """A run path as given, or for `hf://user/model[@REVISION]` the local directory holding that
    model (downloaded into the Hugging Face cache), checked to be an aiayn model."""
    if not is_hub_path(path):
        return path
    repo_id, revision = parse_hub_path(str(path))
    local = download(repo_id, revision)
    missing = [n for n in (HUB_WEIGHTS, "spm.model") if not (local / n).is_file()]
    if missing:
        raise HubError(f"{path} holds no aiayn model: no {' or '.join(missing)} in the repository")
    try:
        read_metadata(local / HUB_WEIGHTS)
    except CheckpointError:
        raise HubError(f"{path} holds no aiayn model: its {HUB_WEIGHTS} carries no aiayn model config") from None
    return local

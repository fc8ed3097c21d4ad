"""Configuration dataclasses.

`ModelConfig` describes one Transformer (paper §3, Table 3). Presets follow the paper's
`base` and `big` rows; `small` and `tiny` are CPU-scale sizes for Multi30k and tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from aiayn.errors import ConfigError
from aiayn.fileio import atomic_write

T = TypeVar("T")


# Special ids, shared by the tokenizer, the data layer and the model (docs/architecture.md, Conventions).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1  # §5.4: sub-layer outputs and embedding+position sums
    attention_dropout: float = 0.0  # on attention weights; the paper does not use it
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # §3.5 / Table 3 row (E)
    max_positions: int = 1024
    norm: Literal["post", "pre"] = "post"  # §3.1: LayerNorm(x + Sublayer(x))
    tie_embeddings: bool = True  # §3.4: one matrix for both embeddings and the pre-softmax projection
    d_head: int | None = None  # d_k (and d_v); None means d_model / n_heads (§3.2.2). Table 3 (B) sets it.
    d_value: int | None = None  # d_v when it differs from d_k (Table 3 (B) keeps d_v = 64); None = d_k
    attention_window: int | None = None  # Table 1's restricted self-attention: see keys <= r positions away
    # which stack: the paper's encoder-decoder, the encoder alone (BERT) or the decoder alone (GPT)
    kind: Literal["encoder-decoder", "encoder-only", "decoder-only"] = "encoder-decoder"
    n_classes: int | None = None  # encoder-only: a pooled classification head with this many classes
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        if self.vocab_size <= max(self.pad_id, self.bos_id, self.eos_id):
            raise ConfigError(f"vocab_size={self.vocab_size} is too small for the special ids")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.attention_window is not None and self.attention_window < 1:
            raise ConfigError(
                f"attention_window must be >= 1 (or null for full attention), not {self.attention_window}"
            )
        if (self.d_head is not None and self.d_head < 1) or (self.d_value is not None and self.d_value < 1):
            raise ConfigError(f"d_head and d_value must be >= 1, got {self.d_head} and {self.d_value}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ConfigError(f"positional must be 'sinusoidal' or 'learned', not {self.positional!r}")
        if self.kind not in MODEL_KINDS:
            raise ConfigError(f"model kind must be one of {', '.join(MODEL_KINDS)}, not {self.kind!r}")
        if self.n_classes is not None and (self.kind != "encoder-only" or self.n_classes < 2):
            raise ConfigError(
                f"n_classes={self.n_classes}: a classification head needs an encoder-only model and at least 2 classes"
            )
        if self.norm not in ("post", "pre"):
            raise ConfigError(f"norm must be 'post' or 'pre', not {self.norm!r}")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.attention_dropout < 1.0:
            raise ConfigError("dropout rates must lie in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def value_dim(self) -> int:
        return self.d_value if self.d_value is not None else self.head_dim

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides: Any) -> ModelConfig:
        """A named size: `base`/`big` are Table 3's rows; `small`/`tiny` suit CPU-scale data."""
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(vocab_size=vocab_size, **{**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown ModelConfig fields: {sorted(unknown)}")
        return cls(**d)


MODEL_KINDS = ("encoder-decoder", "encoder-only", "decoder-only")

_STUDENT = dict(dropout=0.1, positional="learned")
PRESETS: dict[str, dict[str, Any]] = {
    # Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (65M parameters with 37k BPE)
    "base": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6, n_decoder_layers=6, dropout=0.1),
    # Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M)
    "big": dict(d_model=1024, n_heads=16, d_ff=4096, n_encoder_layers=6, n_decoder_layers=6, dropout=0.3),
    # CPU-scale sizes for Multi30k-like data (about 30k sentence pairs)
    "small": dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, dropout=0.1),
    "tiny": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2, dropout=0.1),
    # distillation students (aiayn distill): a deep encoder, one decoder layer (each output step pays for the
    # decoder's layers: Kasai et al. 2021), and a narrow model; learned positions as the d_model-128 recipes
    "deep-shallow": dict(d_model=128, n_heads=4, d_ff=512, n_encoder_layers=6, n_decoder_layers=1, **_STUDENT),
    "narrow": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=4, n_decoder_layers=2, **_STUDENT),
}


@dataclass
class DataConfig:
    """Where parallel text comes from and how it becomes batches (paper §5.1)."""

    # Which corpus: one the task reads (its TaskSpec.corpora; another is refused before any data work).
    # The two pipelines of aiayn.data read:
    # parallel text: multi30k | files | sources | embedded | wmt14 (`aiayn data get wmt14` first);
    # text (one example a line, or running text): text (files) | multi30k (data.text_langs) | tinyshakespeare
    corpus: str = "multi30k"
    src_lang: str = "de"
    tgt_lang: str = "en"
    data_dir: str | None = None  # offline mirror laid out like Multi30k; else $AIAYN_DATA_DIR, cache, download
    #   (wmt14: where the downloaded archives are, as `aiayn data get wmt14 --data-dir`; the prepared
    #   files are always read from $AIAYN_HOME/wmt14/<pair>/)
    # corpus == "sources": the user's own parallel text, several files, formats and OPUS corpora, each
    #   with a weight and filters (aiayn.data.sources has the keys; docs/data.md the guide)
    sources: list[Any] | None = None
    # rule filters for the training pairs (aiayn.data.filters: names, `default`, {name: {settings}});
    #   null: only empty pairs and data.max_len / max_len_ratio are dropped
    filters: list[Any] | None = None
    # corpus == "files": plain or gzipped line-aligned text (corpus sources: the validation and test
    #   pairs, when no source says split: valid / test)
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    vocab_size: int = 8000  # joint sentencepiece BPE; the paper's WMT EN-DE uses 37000
    spm_model: str | None = None  # reuse this sentencepiece model (vocab_size then unused), e.g. a
    #   run directory's spm.model, so that the new run can be ensembled with that run
    max_len: int = 256  # training pairs longer than this (subwords, either side) are dropped
    max_len_ratio: float = 9.0  # ... and pairs whose length ratio exceeds this
    max_tokens: int = 4096  # per batch, counted on padded source and padded target separately
    bpe_sample_pairs: int = 500_000  # BPE trains on a seeded random sample of this many training pairs
    embedded_size: int = 20000  # pairs in the generated offline corpus
    # -- text for the encoder-only and decoder-only tasks --
    # corpus == "text": plain or gzipped text files, one example per line (a list: their lines in turn);
    # for task classify, tab-separated: LABEL<TAB>TEXT or LABEL<TAB>TEXT_A<TAB>TEXT_B (a sentence pair)
    text_train: str | list[str] | None = None
    text_valid: str | list[str] | None = None  # None with text_unit=document: see valid_fraction
    text_test: str | list[str] | None = None
    text_langs: list[str] | None = None  # corpus == "multi30k": whose captions, e.g. [en] or [en, de, fr, cs]
    text_unit: Literal["line", "document"] = "line"  # document: all the text is one stream (newlines kept)
    valid_fraction: float = 0.1  # document without text_valid: the last share of the training characters
    tokenizer: Literal["bpe", "char"] = "bpe"  # char: one piece per character (nothing normalised)

    def __post_init__(self) -> None:
        if self.tokenizer not in ("bpe", "char"):
            raise ConfigError(f"data.tokenizer must be bpe or char, not {self.tokenizer!r}")
        if self.text_unit not in ("line", "document"):
            raise ConfigError(f"data.text_unit must be line or document, not {self.text_unit!r}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ConfigError(f"data.valid_fraction must lie in (0, 1), not {self.valid_fraction}")


@dataclass
class DecodeConfig:
    """Search settings (paper §6.1: beam 4, length penalty 0.6, max length = input + 50)."""

    beam: int = 4
    length_penalty: float = 0.6  # GNMT lp(Y) = ((5 + |Y|) / 6)^alpha; 0 disables
    max_len_a: float = 1.0  # max output length = a * source length + b
    max_len_b: int = 50
    max_tokens: int = 8192  # translation batches, counted on source tokens x beam
    # Beam search ends a sentence once beam x patience hypotheses have finished (fairseq's and CTranslate2's
    # rule at 1), or earlier when no live beam can still win; inf: only then, tensor2tensor's exact stop.
    patience: float = 1.0
    # Sampling instead of search (back-translation, Edunov et al. 2018): 1 = no sampling (beam / greedy
    # as above); 0 = from the whole distribution; k = from the k likeliest pieces; at this temperature;
    # seeded, each sentence one draw
    sampling_topk: int = 1
    sampling_temperature: float = 1.0
    sampling_seed: int = 0


# --- training (owned by the training layer) ---------------------------------------------------


@dataclass
class TaskConfig:
    """What the run trains: `name`, a task of the registry (aiayn.train.tasks, found through the
    `aiayn.tasks` entry points), and that task's own settings (`options`: the section's other keys,
    read and checked by the task: aiayn.train.tasks.task_options)."""

    name: str = "translate"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass
class OptimConfig:
    """Paper §5.3: Adam(0.9, 0.98, 1e-9) with lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    `lr_scale` multiplies that schedule; `update_freq` accumulates gradients over that many
    micro-batches per update (the paper's ~25k target tokens per step on small hardware).
    `tokens_per_update` instead names the global batch (tokens per update over all ranks) and
    derives `update_freq` from it at startup, so the same config keeps its batch on any GPU count.
    """

    lr_scale: float = 1.0
    warmup: int = 4000
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 disables; the paper does not clip
    label_smoothing: float = 0.1  # §5.4
    # noam: §5.3; cosine: the same warm-up and peak, then a half cosine to min_lr_ratio x peak at
    # train.max_steps (GPT-style language models)
    schedule: Literal["noam", "cosine"] = "noam"
    min_lr_ratio: float = 0.1
    # the last `cooldown` updates before train.max_steps fall linearly towards 0, the last at 1/cooldown of the
    # rate (warmup-stable-decay; 0: no cooldown)
    cooldown: int = 0
    update_freq: int = 1
    # Global batch target (the paper: ~25000); update_freq = max(1, round(target / (max_tokens x world
    # size))) at startup. None: update_freq as given, and the batch grows with the GPU count.
    tokens_per_update: int | None = None

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)  # type: ignore[assignment]
        if len(self.betas) != 2:
            raise ConfigError(f"optim.betas needs two values, got {self.betas}")
        if self.warmup < 1 or self.update_freq < 1:
            raise ConfigError("optim.warmup and optim.update_freq must be >= 1")
        if self.tokens_per_update is not None:
            if self.tokens_per_update < 1:
                raise ConfigError("optim.tokens_per_update must be >= 1 (or null)")
            if self.update_freq != 1:  # two answers to one question: refuse rather than pick one silently
                raise ConfigError(
                    f"optim.update_freq={self.update_freq} and optim.tokens_per_update="
                    f"{self.tokens_per_update} both set the batch; set tokens_per_update null to "
                    f"choose update_freq yourself"
                )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError("optim.label_smoothing must lie in [0, 1)")
        if self.schedule not in ("noam", "cosine") or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(
                f"optim.schedule must be noam | cosine (not {self.schedule!r}) and optim.min_lr_ratio lie in [0, 1]"
            )
        if self.cooldown < 0:
            raise ConfigError(f"optim.cooldown must be >= 0 updates, got {self.cooldown}")


@dataclass
class TrainConfig:
    max_steps: int = 100_000  # optimizer updates (the paper: 100k base, 300k big)
    max_epochs: int | None = None  # stop after this many passes over the data, whichever comes first
    max_minutes: float | None = None  # wall-clock budget of the run, resumes included (then evaluate, save, finish)
    seed: int = 1
    device: str = "auto"  # auto = cuda if available else cpu
    # auto = bf16 on GPUs with native bf16, else fp16; none on CPU
    #   (fp16 also runs on CPU, slowly, with GradScaler("cpu"))
    amp: Literal["auto", "none", "bf16", "fp16"] = "auto"
    compile: bool = False  # torch.compile the training forward
    log_every: int = 100
    eval_every: int = 1000  # validation: the loss and the task's measures; 0 = only at the end
    save_every: int = 1000
    keep_last: int = 5  # step checkpoints kept (plus best.safetensors); >= 5 lets `average --last 5` work
    eval_max_sentences: int = 500  # the validation sentences a task decodes for its measure, at most (0 = all)
    # Early stopping: stop after this many validations without a better patience_metric (0 = never).
    # The best weights by that metric are RUN/best.safetensors whether or not patience is set.
    patience: int = 0
    # auto: the task's own choice (translate: bleu with task.eval_bleu, else loss); else loss or one of the
    # validation measures the task declares (TaskSpec.measures: bleu, accuracy, ...)
    patience_metric: str = "auto"
    nan_limit: int = 5  # consecutive skipped (non-finite or fp16-overflow) updates before training stops
    progress: bool = True  # tqdm bar (on stderr)
    tensorboard: bool = False  # also write metrics.jsonl's records as TensorBoard events in RUN/tensorboard
    threads: int | None = None  # torch CPU threads (None = torch default)
    dist_timeout_s: float = 600  # how long a collective waits for the slowest rank before failing
    # Deterministic kernels only (torch.use_deterministic_algorithms; an op without one raises), for
    # bitwise-exact resume on GPU. On CPU, resume is bitwise already; on GPU without this it is not.
    deterministic: bool = False

    def __post_init__(self) -> None:
        if self.amp not in ("auto", "none", "bf16", "fp16"):
            raise ConfigError(f"train.amp must be auto | none | bf16 | fp16, not {self.amp!r}")
        if self.max_steps < 1 or self.log_every < 1 or self.save_every < 1 or self.keep_last < 1:
            raise ConfigError("train.max_steps, log_every, save_every and keep_last must be >= 1")
        if self.patience < 0 or (self.patience and not self.eval_every):
            raise ConfigError("train.patience must be >= 0, and needs train.eval_every > 0 (validations to count)")


_SECTIONS = ("model", "data", "optim", "train", "decode", "task")


@dataclass
class Config:
    """Everything a run needs. `model` is a preset name plus ModelConfig overrides; the vocabulary
    size always comes from the prepared tokenizer, so it is not part of the file.

        cfg = Config.load("multi30k_de_en", ["--optim.lr_scale", "2"])   # a packaged recipe, or a file
    """

    model: dict[str, Any] = dataclasses.field(default_factory=lambda: {"preset": "small"})
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)

    def __post_init__(self) -> None:
        self.model = dict(self.model)
        self.model.setdefault("preset", "small")
        if self.model["preset"] not in PRESETS:
            raise ConfigError(f"unknown model preset {self.model['preset']!r}; choose one of {sorted(PRESETS)}")
        known = {f.name for f in dataclasses.fields(ModelConfig)} | {"preset"}
        unknown = set(self.model) - known
        if unknown:
            raise ConfigError(f"unknown model fields {sorted(unknown)}; known: {sorted(known)}")
        if self.optim.cooldown > self.train.max_steps:
            raise ConfigError(
                f"optim.cooldown={self.optim.cooldown} is longer than the run (train.max_steps={self.train.max_steps})"
            )
        # bad sizes fail now, not after data preparation (the task checks its row length: aiayn.train.tasks)
        self.model_config(vocab_size=max(PAD_ID, UNK_ID, BOS_ID, EOS_ID) + 1)

    def model_config(self, vocab_size: int, n_classes: int | None = None, kind: str = "encoder-decoder") -> ModelConfig:
        """The model this run trains: the preset, the file's overrides, the task's kind of stack
        (`kind`, from the task's TaskSpec) and its classes (labelled data only)."""
        overrides = {k: v for k, v in self.model.items() if k not in ("preset", "vocab_size", "kind", "n_classes")}
        return ModelConfig.preset(
            self.model["preset"],
            vocab_size=vocab_size,
            kind=kind,
            n_classes=n_classes,
            **overrides,
        )

    def to_dict(self) -> dict[str, Any]:
        d = {k: dataclasses.asdict(getattr(self, k)) for k in _SECTIONS if k not in ("model", "task")}
        d["optim"]["betas"] = list(d["optim"]["betas"])
        d["task"] = {"name": self.task.name, **self.task.options}
        return {"model": dict(self.model), **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        unknown = set(d) - set(_SECTIONS)
        if unknown:
            raise ConfigError(f"unknown config sections {sorted(unknown)}; known: {list(_SECTIONS)}")
        kinds = {
            "data": DataConfig,
            "optim": OptimConfig,
            "train": TrainConfig,
            "decode": DecodeConfig,
        }
        mfields = {f.name: str(f.type) for f in dataclasses.fields(ModelConfig)}
        parts: dict[str, Any] = {
            "model": {
                k: _coerce(v, mfields[k], f"model.{k}") if k in mfields else v
                for k, v in (d.get("model") or {}).items()
            }
        }
        task = dict(d.get("task") or {})
        sections = {name: dict(d.get(name) or {}) for name in kinds}
        _hand_over_moved(sections, kinds, task)
        for name, kind in kinds.items():
            parts[name] = build_section(kind, sections[name], name)
        parts["task"] = TaskConfig(name=str(task.pop("name", TaskConfig.name)), options=task)
        return cls(**parts)

    @classmethod
    def load(cls, path: str | None = None, overrides: list[str] | dict[str, Any] | None = None) -> Config:
        """Read a YAML/TOML file or a packaged recipe by name (or start from defaults) and apply dotted
        overrides."""
        d = read_config_file(path) if path else {}
        if overrides:
            pairs = dict(overrides) if isinstance(overrides, dict) else parse_overrides(overrides)
            task = d.get("task") or {}
            if "task.name" in pairs and pairs["task.name"] != task.get("name", TaskConfig.name):
                d["task"] = {}  # the file's task settings belong to its task, not to the one named now
            for key, value in pairs.items():
                section, _, name = key.partition(".")
                if section not in _SECTIONS or not name or "." in name:
                    raise ConfigError(
                        f"override {key!r} must look like SECTION.FIELD with SECTION one of {list(_SECTIONS)}"
                    )
                d.setdefault(section, {})
                d[section] = {**(d[section] or {}), name: value}
        return cls.from_dict(d)

    def save(self, path: str | Any) -> None:
        import yaml

        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        atomic_write(path, lambda tmp: open(tmp, "w").write(text))


def _hand_over_moved(sections: dict[str, dict[str, Any]], kinds: dict[str, type], task: dict[str, Any]) -> None:
    """Keys of the global sections that a task took over (its TaskSpec.moved, e.g. train.eval_bleu), as a
    run saved before still has them and as users may still write them: moved into `task` as the run's
    task's setting of that name (its section's own value first), dropped for a run of another task.
    Which keys moved is known from the tasks' records (aiayn.registry), read only when a section has a
    key it does not know; any other such key stays, to be refused as unknown."""
    known = {n: {f.name for f in dataclasses.fields(cast(Any, kinds[n]))} for n in sections}
    unknown = {f"{n}.{k}" for n, keys in sections.items() for k in keys if k not in known[n]}
    if not unknown:
        return
    from aiayn import registry

    moved = registry.moved_settings()
    name = task.get("name", TaskConfig.name)
    for key in sorted(unknown & set(moved)):
        section, _, field = key.partition(".")
        value = sections[section].pop(field)
        if name in moved[key]:
            task.setdefault(field, value)


def read_config_file(path: str | Any) -> dict[str, Any]:
    """A YAML/TOML config file as a dict: `path` names a file, or a recipe of the package (`quickstart`)."""
    from aiayn.recipes import resolve

    p = resolve(path)
    if p.suffix == ".toml":
        import tomllib

        d = tomllib.loads(p.read_text())
    elif p.suffix in (".yaml", ".yml"):
        import yaml

        d = yaml.safe_load(p.read_text()) or {}
    else:
        raise ConfigError(f"config file must end in .yaml, .yml or .toml: {p}")
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: top level must be a mapping of sections")
    return d


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`["--optim.lr_scale", "2", "--train.amp=bf16"]` -> {"optim.lr_scale": 2, "train.amp": "bf16"}.
    Values are parsed as YAML scalars/lists (so 2 -> int, true -> bool, [1, 2] -> list)."""
    import yaml

    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or "." not in arg:
            raise ConfigError(f"unexpected argument {arg!r}; overrides look like --section.field VALUE")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"override {arg} needs a value")
            key, value = arg[2:], args[i + 1]
            i += 2
        out[key] = yaml.safe_load(value) if value != "" else ""
    return out


def _coerce(value: Any, hint: str, where: str) -> Any:
    """Make file/CLI values fit the annotated field type (YAML reads 1e-9 as a string, ints as floats)."""
    if value is None:
        return None
    h = hint.replace(" ", "")
    try:
        if h.startswith("float"):
            return float(value)
        if h.startswith("int") and not isinstance(value, bool):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if h.startswith("bool"):
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if h.startswith("tuple[float"):
            return tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: cannot use {value!r} as {hint}") from None
    return value


def build_section(kind: type[T], d: dict[str, Any], section: str) -> T:
    """The dataclass `kind` from one section's keys, each value made to fit its field's type; an
    unknown key is a ConfigError naming the known ones."""
    fields = {f.name: f for f in dataclasses.fields(cast(Any, kind))}
    unknown = set(d) - set(fields)
    if unknown:
        raise ConfigError(f"unknown {section} fields {sorted(unknown)}; known: {sorted(fields)}")
    return kind(**{k: _coerce(v, str(fields[k].type), f"{section}.{k}") for k, v in d.items()})

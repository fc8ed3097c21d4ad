"""CTranslate2 export: the exported model computes what ours computes, token for token.

A tiny model is trained for about 15 seconds to reverse sequences, so its outputs are confident and
end with EOS (an untrained model repeats one token to the length limit). Then the same sources
are scored / translated by aiayn and by CTranslate2 and compared.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import ctranslate2  # a test dependency (pyproject's [test] extra): missing, the module must fail, not skip
import pytest
import torch

from aiayn import decode
from aiayn.checkpoint import CheckpointError, save_weights
from aiayn.config import BOS_ID, EOS_ID, ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.devices import cpu_cores
from aiayn.export import export_ctranslate2, spm_vocabulary
from aiayn.model import Transformer, padding_mask
from inprocess import run_aiayn

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
N_SYMBOLS = 40  # the task uses the last 40 pieces of the vocabulary


def _batch(symbols: torch.Tensor, n: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Reverse task: src = x + EOS, tgt_in = BOS + reversed(x), tgt_out = reversed(x) + EOS."""
    lengths = torch.randint(3, 9, (n,), generator=g)
    body = symbols[torch.randint(len(symbols), (n, 8), generator=g)]
    src, tin, tout = (torch.zeros(n, 9, dtype=torch.long) for _ in range(3))
    for i, L in enumerate(lengths.tolist()):
        x = body[i, :L]
        src[i, :L], src[i, L] = x, EOS_ID
        tin[i, 0], tin[i, 1 : L + 1] = BOS_ID, x.flip(0)
        tout[i, :L], tout[i, L] = x.flip(0), EOS_ID
    return src, tin, tout


STEPS = 300  # of train_reverser


def train_reverser(root: Path) -> tuple[Transformer, Tokenizer, torch.Tensor]:
    """A tiny model trained to reverse sequences of the last N_SYMBOLS pieces, its tokenizer (root/spm.model,
    trained on random word lines) and those symbols. Shared with tests/test_argos.py."""
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(300)]
    tok = Tokenizer.train(lines, root / "spm.model", vocab_size=320, threads=1)
    V = tok.vocab_size
    symbols = torch.arange(V - N_SYMBOLS, V)

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", V, dropout=0.0))
    # lr decays to 0: at a constant 3e-3 the loss spikes now and then (0.37 -> 0.52 -> 0.04 around
    # step 200 on one CPU), so where training stops decided whether the model had learned the task.
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / STEPS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is as fast, and immune to spin-waits on a busy machine
    try:
        for _ in range(STEPS):
            src, tin, tout = _batch(symbols, 64, g)
            loss = torch.nn.functional.cross_entropy(model(src, tin).flatten(0, 1), tout.flatten(), ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval(), tok, symbols


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, reverser: tuple) -> dict:
    root = tmp_path_factory.mktemp("export")
    trained, model, tok, symbols = reverser  # train_reverser's, shared with tests/test_argos.py
    shutil.copyfile(trained / "spm.model", root / "spm.model")
    steps = STEPS
    held = _batch(symbols, 256, torch.Generator().manual_seed(2))  # unseen batch: did it learn the task?
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(
            model(held[0], held[1]).flatten(0, 1), held[2].flatten(), ignore_index=0
        )

    run = root / "run"
    save_weights(model, run / "checkpoints" / f"step_{steps:08d}.safetensors", step=steps)
    shutil.copyfile(root / "spm.model", run / "spm.model")
    ct2_dir = root / "ct2"
    proc = run_aiayn("export", "--ctranslate2", str(ct2_dir), "-c", str(run), text=True)  # the real command line
    assert proc.returncode == 0, proc.stderr
    src, _, _ = _batch(symbols, 12, torch.Generator().manual_seed(1))
    return dict(root=root, run=run, tok=tok, model=model, ct2_dir=ct2_dir, src=src, loss=loss.item())


def _pieces(tok: Tokenizer, ids: list[int]) -> list[str]:
    return [tok.sp.id_to_piece(i) for i in ids]


def _sources(setup: dict) -> list[list[str]]:
    """CTranslate2 inputs: pieces without EOS (its config appends EOS, as our data layer does)."""
    return [_pieces(setup["tok"], [i for i in row if i > EOS_ID]) for row in setup["src"].tolist()]


def _ids(tok: Tokenizer, pieces: list[str]) -> list[int]:
    return [tok.sp.piece_to_id(p) for p in pieces]


def test_export_writes_a_self_contained_directory(setup: dict) -> None:
    d = setup["ct2_dir"]
    assert {"model.bin", "config.json", "shared_vocabulary.json", "spm.model"} <= {p.name for p in d.iterdir()}
    assert (d / "spm.model").read_bytes() == (setup["run"] / "spm.model").read_bytes()
    import json

    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["bos_token"], cfg["eos_token"], cfg["decoder_start_token"]) == ("<s>", "</s>", "<s>")
    assert cfg["add_source_eos"] is True and cfg["layer_norm_epsilon"] == 1e-5
    assert json.loads((d / "shared_vocabulary.json").read_text()) == spm_vocabulary(d / "spm.model")
    assert setup["loss"] < 0.1, "the reverse task did not train: outputs would be degenerate"


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_teacher_forced_log_probs_match(setup: dict, norm: str, tmp_path: Path) -> None:
    """Every position's log p(y_t | y_<t, x) agrees: weights, positions, scaling, norms, masks."""
    tok = setup["tok"]
    if norm == "post":
        model, ct2_dir = setup["model"], setup["ct2_dir"]
    else:  # an untrained pre-LN model with learned positions: the other code paths of the exporter
        torch.manual_seed(1)
        model = Transformer(
            ModelConfig.preset("tiny", tok.vocab_size, norm="pre", positional="learned", dropout=0.0)
        ).eval()
        ct2_dir = export_ctranslate2(model, tmp_path / "ct2_pre", spm_file=setup["root"] / "spm.model")
    tr = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    src = setup["src"]
    tgt = [list(reversed([i for i in row if i > EOS_ID])) for row in src.tolist()]
    T = max(map(len, tgt)) + 1
    tin = torch.zeros(len(tgt), T, dtype=torch.long)
    for r, y in enumerate(tgt):
        tin[r, : len(y) + 1] = torch.tensor([BOS_ID] + y)
    with torch.no_grad():
        lp = model(src, tin).log_softmax(-1)  # (B, T, V)
    results = tr.score_batch(_sources(setup), [_pieces(tok, y) for y in tgt])
    for r, (y, res) in enumerate(zip(tgt, results)):
        ours = lp[r, torch.arange(len(y) + 1), torch.tensor(y + [EOS_ID])]
        assert len(res.log_probs) == len(y) + 1
        torch.testing.assert_close(torch.tensor(res.log_probs), ours, atol=1e-4, rtol=1e-4)


def _greedy_reference(model: Transformer, src: torch.Tensor, max_len: int) -> list[list[int]]:
    """Plain cached greedy decoding (the test's own reference; the library's search is tested below)."""
    with torch.no_grad():
        cache = model.init_cache(model.encode(src), padding_mask(src, 0))
        y, out, done = torch.full((src.size(0), 1), BOS_ID), [], torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits, cache = model.step(y, cache)
            y = logits[:, -1].argmax(-1, keepdim=True)
            out.append(y[:, 0])
            done |= y[:, 0] == EOS_ID
            if done.all():
                break
    rows = torch.stack(out, 1).tolist()
    return [row[: row.index(EOS_ID)] if EOS_ID in row else row for row in rows]


def test_greedy_outputs_match(setup: dict) -> None:
    tok, src = setup["tok"], setup["src"]
    tr = ctranslate2.Translator(str(setup["ct2_dir"]), device="cpu", intra_threads=1)
    ct2 = [_ids(tok, r.hypotheses[0]) for r in tr.translate_batch(_sources(setup), beam_size=1, max_decoding_length=30)]
    ours = _greedy_reference(setup["model"], src, 30)
    assert ours == ct2
    reversed_ok = sum(o == list(reversed([i for i in s if i > EOS_ID])) for o, s in zip(ours, src.tolist()))
    assert reversed_ok >= len(ours) // 2  # non-degenerate outputs: mostly the reversal


def test_library_greedy_and_beam_match_ctranslate2(setup: dict) -> None:
    tok, src, model = setup["tok"], setup["src"], setup["model"]
    tr = ctranslate2.Translator(str(setup["ct2_dir"]), device="cpu", intra_threads=1)
    sources = _sources(setup)

    greedy = decode.greedy_search(model, src, max_len_a=1.0, max_len_b=20)
    ct2 = tr.translate_batch(sources, beam_size=1, max_decoding_length=30)
    assert greedy == [_ids(tok, r.hypotheses[0]) for r in ct2]

    # length_penalty 0: both rank by the raw sum of log-probabilities (EOS included).
    beam = decode.beam_search(model, src, beam=4, length_penalty=0.0, max_len_a=1.0, max_len_b=20)
    ct2 = tr.translate_batch(sources, beam_size=4, length_penalty=0.0, max_decoding_length=30, return_scores=True)
    # Our score is the exact sum of log-probs, EOS included: CT2's teacher-forced score_batch of the
    # same hypothesis. Not CT2's own beam score, which runs 0.02-0.8 % above its exact score (4.8.5).
    exact = tr.score_batch(sources, [r.hypotheses[0] for r in ct2])
    for ours, theirs, ref in zip(beam, ct2, exact):
        ids, score = ours[0]
        assert ids == _ids(tok, theirs.hypotheses[0])
        assert score == pytest.approx(sum(ref.log_probs), abs=1e-4)


def test_int8_export_runs_and_mostly_agrees(setup: dict, tmp_path: Path) -> None:
    out = export_ctranslate2(setup["run"], tmp_path / "int8", quantization="int8")
    assert (out / "model.bin").stat().st_size < (setup["ct2_dir"] / "model.bin").stat().st_size
    tr = ctranslate2.Translator(str(out), device="cpu", compute_type="int8", intra_threads=1)
    got = [_ids(setup["tok"], r.hypotheses[0]) for r in tr.translate_batch(_sources(setup), beam_size=1)]
    ours = _greedy_reference(setup["model"], setup["src"], 30)
    assert sum(a == b for a, b in zip(got, ours)) >= len(ours) * 3 // 4


def test_export_errors_are_clear(setup: dict, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copyfile(
        next((setup["run"] / "checkpoints").glob("*.safetensors")), run / "checkpoints" / "step_00000001.safetensors"
    )
    with pytest.raises(CheckpointError, match="spm.model"):
        export_ctranslate2(run, tmp_path / "out")
    with pytest.raises(RuntimeError, match="already exists"):
        export_ctranslate2(setup["run"], setup["ct2_dir"])


def test_a_model_with_d_v_unlike_d_k_is_refused_in_one_line(tmp_path):
    from aiayn.config import ConfigError
    from aiayn.export import save_ctranslate2

    model = Transformer(ModelConfig.preset("tiny", vocab_size=8, d_head=8, d_value=16))
    with pytest.raises(ConfigError, match="d_v = d_k; this model has d_k=8, d_v=16"):
        save_ctranslate2(model, [f"t{i}" for i in range(8)], tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()
    windowed = Transformer(ModelConfig.preset("tiny", vocab_size=8, attention_window=4))
    with pytest.raises(ConfigError, match="no restricted self-attention; this model's attention_window is 4"):
        save_ctranslate2(windowed, [f"t{i}" for i in range(8)], tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


# -- the engines behind Translator, on the trained run ----------------------------------------------


def _texts(setup: dict) -> list[str]:
    """The fixture's sources as text (what a user would give Translator)."""
    tok = setup["tok"]
    return [tok.decode([i for i in row if i > EOS_ID]) for row in setup["src"].tolist()]


def _copy_run(setup: dict, dest: Path) -> Path:
    shutil.copytree(setup["run"], dest, ignore=shutil.ignore_patterns("ct2"))
    return dest


def test_auto_picks_ctranslate2_on_the_cpu_and_torch_where_it_cannot(setup: dict, tmp_path: Path) -> None:
    from aiayn import Translator
    from aiayn.decode.engines import choose_engine
    from aiayn.errors import AiaynError

    run = _copy_run(setup, tmp_path / "run")
    t = Translator.load(run, device="cpu")
    assert (t.engine, t.engine_reason) == ("ctranslate2", f"CPU, ctranslate2 {ctranslate2.__version__} installed")
    t = Translator.load(run, device="cpu", engine="torch")
    assert (t.engine, t.engine_reason) == ("torch", "asked for")
    engine, why = choose_engine("auto", run, ensemble=[run])
    assert engine == "torch" and why == "an ensemble of 2 models: CTranslate2 decodes one model"
    with pytest.raises(AiaynError, match="cannot decode .*ensemble"):
        Translator.load(run, device="cpu", ensemble=[run], engine="ctranslate2")

    windowed = tmp_path / "windowed"
    windowed.mkdir()
    shutil.copyfile(run / "spm.model", windowed / "spm.model")
    cfg = ModelConfig.preset("tiny", setup["tok"].vocab_size, attention_window=3)
    save_weights(Transformer(cfg).eval(), windowed / "best.safetensors", step=1)
    t = Translator.load(windowed, device="cpu")
    assert t.engine == "torch" and t.engine_reason == (
        "restricted self-attention (attention_window 3): CTranslate2 has none"
    )
    assert t.translate(["alpha bravo"], beam=2, max_len_b=3)  # torch decodes it

    ct2 = Translator.load(setup["ct2_dir"])  # an exported directory: only CTranslate2 runs it
    assert (ct2.engine, ct2.engine_reason) == ("ctranslate2", "a CTranslate2 export")
    with pytest.raises(AiaynError, match="CTranslate2 export"):
        Translator.load(setup["ct2_dir"], engine="torch")


def _aiayn(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return run_aiayn(*args, input=stdin)


def test_translate_prints_the_weights_then_one_engine_line(setup: dict, tmp_path: Path) -> None:
    run = _copy_run(setup, tmp_path / "run")
    stdin = ("\n".join(_texts(setup)[:3]) + "\n").encode()
    r = _aiayn("translate", "-c", str(run), "--beam", "1", stdin=stdin)
    assert r.returncode == 0, r.stderr.decode()
    cores = cpu_cores()
    step = f"step_{STEPS:08d}.safetensors (step {STEPS}"
    newest = f"weights: {run}/checkpoints/{step}; the newest checkpoint: no best.safetensors)"
    assert r.stderr.decode().splitlines() == [
        newest,
        f"engine: ctranslate2 (CPU, ctranslate2 {ctranslate2.__version__} installed; {cores} replica"
        f"{'s' if cores > 1 else ''} x 1 thread; --engine torch for PyTorch)",
    ]
    one = _aiayn("translate", "-c", str(run), "--beam", "1", "--threads", "2", "--replicas", "1", stdin=stdin)
    assert "; 1 replica x 2 threads; " in one.stderr.decode() and one.stdout == r.stdout  # same answers
    t = _aiayn("translate", "-c", str(run), "--beam", "1", "--engine", "torch", stdin=stdin)
    assert t.stderr.decode().splitlines() == [newest, "engine: torch (--engine torch)"]
    assert t.stdout == r.stdout  # greedy: the same text from both engines
    e = _aiayn("translate", "-c", str(run), str(run), "--beam", "2", stdin=stdin)  # an ensemble
    assert e.stderr.decode().splitlines()[:2] == [
        f"{newest} + {newest.removeprefix('weights: ')}",
        "engine: torch (an ensemble of 2 models: CTranslate2 decodes one model)",
    ]


def test_greedy_is_token_for_token_the_same_on_both_engines(setup: dict, tmp_path: Path) -> None:
    from aiayn import Translator

    run = _copy_run(setup, tmp_path / "run")
    ours, theirs = Translator.load(run, "cpu", engine="torch"), Translator.load(run, "cpu", engine="ctranslate2")
    lines = _texts(setup) + ["", " ".join(WORDS * 4)]  # an empty line, one that runs to its limit
    for a, b in ((1.0, 20), (0.0, 3), (0.5, 0), (1.0, 50)):
        enc = [ours.tokenizer.encode(x) for x in lines]
        d = ours.search_config(beam=1, max_len_a=a, max_len_b=b)
        want = ours.searcher.search([e for e in enc if e], d, 1)
        got = theirs.searcher.search([e for e in enc if e], d, 1)
        assert [h[0][0] for h in got] == [h[0][0] for h in want], (a, b)
        out = theirs.translate(lines, beam=1, max_len_a=a, max_len_b=b)
        assert out == ours.translate(lines, beam=1, max_len_a=a, max_len_b=b)
        assert out[-2] == ""
    # The default layout: one single-threaded CTranslate2 replica per core, so the token batches of one
    # call above were spread over several replicas (on a machine with more than one core).
    assert theirs.searcher.translator.num_translators == cpu_cores()


def test_cpu_cores_follows_the_affinity_and_a_containers_quota(tmp_path: Path) -> None:
    from aiayn.devices import _cgroup_quota

    assert 1 <= cpu_cores() <= len(os.sched_getaffinity(0))
    v2 = tmp_path / "v2"
    v2.mkdir()
    for text, want in (("max 100000\n", None), ("200000 100000\n", 2), ("150000 100000\n", 2), ("50000 100000", 1)):
        (v2 / "cpu.max").write_text(text)
        assert _cgroup_quota(str(v2)) == want, text
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    for quota, want in (("-1", None), ("300000", 3)):
        (v1 / "cpu.cfs_quota_us").write_text(quota + "\n")
        (v1 / "cpu.cfs_period_us").write_text("100000\n")
        assert _cgroup_quota(str(tmp_path / "v1")) == want, quota
    assert _cgroup_quota(str(tmp_path / "none")) is None


def test_ctranslate2_layout_one_single_threaded_replica_per_core_unless_told() -> None:
    from aiayn.decode.engines import ctranslate2_layout
    from aiayn.errors import AiaynError

    cores = cpu_cores()
    assert ctranslate2_layout("cpu") == (1, cores)
    assert ctranslate2_layout("cpu", threads=2) == (2, 1)  # threads given: one replica on them
    assert ctranslate2_layout("cpu", replicas=3) == (max(1, cores // 3), 3)  # replicas given: cores shared
    assert ctranslate2_layout("cpu", threads=2, replicas=3) == (2, 3)
    assert ctranslate2_layout("cuda") == (0, 1)  # a GPU: one replica
    with pytest.raises(AiaynError, match=">= 0"):
        ctranslate2_layout("cpu", threads=-1)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_and_n_best_agree_with_our_search(setup: dict, tmp_path: Path, alpha: float) -> None:
    """The same hypotheses, scored by our formula (sum log p / GNMT lp, EOS counted), best first."""
    from aiayn import Translator

    run = _copy_run(setup, tmp_path / "run")
    ours, theirs = Translator.load(run, "cpu", engine="torch"), Translator.load(run, "cpu", engine="ctranslate2")
    lines = _texts(setup) + [""]
    for b in (20, 2):  # ends with EOS; cut by the limit (forced EOS, scored exactly)
        kw = dict(beam=4, length_penalty=alpha, max_len_a=1.0, max_len_b=b)
        want, got = ours.translate_scored(lines, n_best=3, **kw), theirs.translate_scored(lines, n_best=3, **kw)
        assert got[-1] == [("", got[-1][0][1])] or got[-1][0][0] == ""  # empty line -> empty output
        for w, g in zip(want[:-1], got[:-1]):
            assert len(g) == 3 and [s for _, s in g] == sorted((s for _, s in g), reverse=True)
            assert g[0][0] == w[0][0], (alpha, b)
            assert g[0][1] == pytest.approx(w[0][1], rel=1e-2, abs=1e-3)
        assert theirs.translate(lines, **kw) == [h[0][0] for h in got]


def test_the_export_is_cached_in_the_run_and_rebuilt_when_the_weights_change(setup: dict, tmp_path: Path) -> None:
    from aiayn import Translator
    from aiayn.export import cached_export

    run = _copy_run(setup, tmp_path / "run")
    first, built = cached_export(run)
    assert built and first.parent == run / "ct2" and (first / "model.bin").is_file()
    stamp = (first / "model.bin").stat().st_mtime_ns
    again, built = cached_export(run)
    assert (again, built) == (first, False) and (first / "model.bin").stat().st_mtime_ns == stamp
    assert Translator.load(run, "cpu").searcher.model_dir == first  # the Translator reuses it
    assert [p.name for p in (run / "ct2").iterdir() if p.name.startswith(".")] == []  # no temp dir left

    # New weights (same file name): a new key, a new export; the old one is not taken for it.
    torch.manual_seed(3)
    other = Transformer(setup["model"].config).eval()
    ckpt = next((run / "checkpoints").glob("*.safetensors"))
    save_weights(other, ckpt, step=300)
    fresh, built = cached_export(run)
    assert built and fresh != first
    t = Translator.load(run, "cpu")
    assert t.searcher.model_dir == fresh
    assert t.translate(["alpha bravo"], beam=1) == Translator.load(run, "cpu", engine="torch").translate(
        ["alpha bravo"], beam=1
    )
    int8, built = cached_export(run, quantization="int8")  # quantization is part of the key
    assert built and int8 not in (first, fresh)


def test_averaged_weights_are_exported(setup: dict, tmp_path: Path) -> None:
    from aiayn import Translator

    run = _copy_run(setup, tmp_path / "run")
    torch.manual_seed(4)
    save_weights(Transformer(setup["model"].config).eval(), run / "checkpoints" / "step_00000400.safetensors", step=400)
    for step in (300, 400):  # list_checkpoints wants the training state beside the weights
        (run / "checkpoints" / f"step_{step:08d}.state.pt").write_bytes(b"")
    ct2 = Translator.load(run, "cpu", average_last=2)
    assert ct2.engine == "ctranslate2" and '"average_last": 2' in (ct2.searcher.model_dir / "source.json").read_text()
    ours = Translator.load(run, "cpu", average_last=2, engine="torch")
    lines = _texts(setup)[:6]
    assert ct2.translate(lines, beam=1, max_len_b=5) == ours.translate(lines, beam=1, max_len_b=5)


def test_a_run_it_cannot_write_into_exports_under_aiayn_home(setup: dict, tmp_path: Path, monkeypatch) -> None:
    from aiayn.export import cached_export

    run = _copy_run(setup, tmp_path / "run")
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    (run / "ct2").write_text("")  # RUN/ct2 cannot be made (a read-only run fails the same way, but not as root)
    out, built = cached_export(run)
    assert built and out.parent == tmp_path / "home" / "ct2"
    assert cached_export(run) == (out, False)  # found there next time


_LOAD = """
import sys, time
from aiayn.export import cached_export
t0 = float(sys.argv[2])
while time.time() < t0:
    time.sleep(0.005)
out, built = cached_export(sys.argv[1])
from aiayn import Translator
t = Translator.load(sys.argv[1], "cpu")
assert t.engine == "ctranslate2" and t.searcher.model_dir == out
print(out, built, t.translate(["alpha bravo charlie"], beam=1)[0].replace(" ", "_"))
"""


def test_two_processes_starting_at_once_export_once(setup: dict, tmp_path: Path) -> None:
    import os
    import time

    run = _copy_run(setup, tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    start = str(time.time() + 4)  # both past their imports, then released together
    procs = [
        subprocess.Popen([sys.executable, "-c", _LOAD, str(run), start], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0][0] == outs[1][0] and outs[0][2] == outs[1][2]  # one export, the same translation
    assert sorted(o[1] for o in outs) == ["False", "True"]  # one exported, the other waited and reused it
    assert len([p for p in (run / "ct2").iterdir() if p.is_dir()]) == 1


def _bleu(hyps: list[list[int]], refs: list[list[int]]) -> float:
    import sacrebleu

    words = lambda rows: [" ".join(f"t{i}" for i in row) for row in rows]  # noqa: E731  # one word per piece
    return sacrebleu.corpus_bleu(words(hyps), [words(refs)], tokenize="none").score


def test_int8_bleu_is_within_noise_of_float32_on_the_trained_model(setup: dict) -> None:
    """README: int8 decoding keeps BLEU within noise of float32. On the trained reverse model and 300
    unseen sentences, int8's BLEU may fall below float32's by at most the noise of the measure: the
    half-width of float32's 95 % bootstrap interval over these sentences (resampled with replacement,
    as sacreBLEU's --confidence does), and at least what one sentence costs (float32's outputs with
    one of the 300 emptied): a model this confident scores 100 on every resample, so the interval
    alone would have zero width and ask int8 for bit-identical search results on every CPU. (Weights
    on a 4-bit grid instead of 8 change 6 of the 300 greedy outputs, about 1 BLEU, and fail.)"""
    from aiayn.model.int8 import quantize_int8

    model = setup["model"]
    V = setup["tok"].vocab_size
    src, _, _ = _batch(torch.arange(V - N_SYMBOLS, V), 300, torch.Generator().manual_seed(3))
    refs = [list(reversed([i for i in row if i > EOS_ID])) for row in src.tolist()]
    q = quantize_int8(model)
    for search in (
        lambda m: decode.greedy_search(m, src, max_len_a=1.0, max_len_b=5),
        lambda m: [n[0][0] for n in decode.beam_search(m, src, beam=4, length_penalty=0.6, max_len_a=1.0, max_len_b=5)],
    ):
        h32, h8 = search(model), search(q)
        b32, b8 = _bleu(h32, refs), _bleu(h8, refs)
        assert b32 > 90, f"float32 BLEU {b32:.1f}: the fixture did not learn the task, the comparison means nothing"
        g = random.Random(0)
        boot = sorted(
            _bleu([h32[i] for i in idx], [refs[i] for i in idx])
            for idx in ([g.randrange(len(refs)) for _ in refs] for _ in range(200))
        )
        one_sentence = b32 - _bleu([[]] + h32[1:], refs)
        noise = max((boot[194] - boot[4]) / 2, one_sentence)  # 2.5th to 97.5th percentile
        assert 0 < noise < 5
        assert b8 >= b32 - noise, f"int8 BLEU {b8:.2f} vs float32 {b32:.2f} (noise {noise:.2f})"


def test_both_engines_read_the_same_encoder_decoder_attention(setup: dict, tmp_path: Path) -> None:
    """Translator.align's input: the last decoder layer's encoder-decoder attention, heads averaged, as the
    model reads a given target. CTranslate2's attention output is the export's alignment (its default would
    be the first head alone); a model that reverses its input reads source piece L-1-j as it writes piece j."""
    from aiayn import Translator

    run = _copy_run(setup, tmp_path / "run")
    ours, theirs = Translator.load(run, "cpu", engine="torch"), Translator.load(run, "cpu", engine="ctranslate2")
    sources = [[i for i in row if i > EOS_ID] for row in setup["src"].tolist()]
    targets = [s[::-1] for s in sources]
    got = theirs.searcher.cross_attention(sources + [[]], targets + [[]])
    want = ours.searcher.cross_attention(sources + [[]], targets + [[]])
    assert got[-1] is None and want[-1] is None  # nothing to read
    for s, x, y in zip(sources, want, got):
        assert tuple(x.shape) == tuple(y.shape) == (len(s), len(s))
        torch.testing.assert_close(y, x, atol=2e-4, rtol=1e-3)
        assert x.argmax(1).tolist() == list(range(len(s) - 1, -1, -1))

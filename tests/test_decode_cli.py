"""Translator API and `aiayn translate` on a real tiny run directory (real sentencepiece, real weights)."""

from __future__ import annotations

import html
import select
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import save_weights
from aiayn.config import ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.model import Transformer
from inprocess import run_aiayn

LINES = [
    "Ein Hund rennt.",
    "Eine Frau fährt Fahrrad auf der Straße.",
    "Zwei Männer spielen Fußball im Park.",
    "A dog runs.",
    "A woman rides a bike on the street.",
    "Two men play football in the park.",
]
SEARCH = ["--max-len-b", "4"]  # untrained weights rarely say EOS: keep outputs short


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run")
    tok = Tokenizer.train(LINES * 20, run / "spm.model", vocab_size=320)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tok.vocab_size, max_positions=32)).eval()
    save_weights(model, run / "best.safetensors", step=5)
    save_weights(model, run / "checkpoints" / "step_00000005.safetensors", step=5)
    return run


def aiayn(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return run_aiayn(*args, input=stdin)


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_translator_api_keeps_order_and_handles_odd_input(run_dir, capsys, engine):
    from aiayn import Translator

    t = Translator.load(run_dir, device="cpu", engine=engine)
    assert t.device.type == "cpu" and t.engine == engine
    long_line = " ".join(["Hund"] * 80)  # far beyond 32 positions
    lines = [LINES[1], "", "   ", LINES[0], "\udcff\x00 \u200b 😀", long_line, LINES[2]]
    out = t.translate(lines, beam=4, max_len_b=4)
    assert len(out) == len(lines) and out[1] == "" and out[2] == ""
    assert all("\n" not in o for o in out)
    assert "input line 6 has" in capsys.readouterr().err
    t.translate_scored([long_line], beam=1, max_len_b=4, first_line=1001)  # a later chunk of a stream
    assert "input line 1001 has" in capsys.readouterr().err
    # batching and sorting by length do not change any translation
    for line, got in zip(lines, out):
        assert t.translate([line], beam=4, max_len_b=4) == [got]
    assert t.translate(lines, beam=1, max_len_b=4) == [t.translate([x], beam=1, max_len_b=4)[0] for x in lines]
    nbest = t.translate(LINES[:2], beam=3, n_best=3, max_len_b=4)
    assert [len(n) for n in nbest] == [3, 3] and nbest[0][0] == out[3]
    scored = t.translate_scored(LINES[:2], beam=3, n_best=3, max_len_b=4)
    assert all(s[0][1] >= s[1][1] >= s[2][1] and s[2][1] < 0 for s in scored)  # best first, log-prob scores


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_load_from_weights_file_finds_spm_in_parent(run_dir, engine):
    from aiayn import Translator

    t = Translator.load(run_dir / "checkpoints" / "step_00000005.safetensors", device="cpu", engine=engine)
    assert t.translate([LINES[0]], beam=2, max_len_b=3) == Translator.load(run_dir, "cpu", engine=engine).translate(
        [LINES[0]], beam=2, max_len_b=3
    )


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_translate_pipe_line_for_line(run_dir, engine):
    from aiayn import Translator

    raw = b"Ein Hund rennt.\r\n\nA dog \xff\xfe runs.\n" + " ".join(["Hund"] * 80).encode() + b"\nno newline at end"
    r = aiayn("translate", "-c", str(run_dir), "--beam", "4", "--engine", engine, *SEARCH, stdin=raw)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == 5  # one output line per input line
    assert out[1] == ""
    assert b"input line 4 has" in r.stderr and b"truncated" in r.stderr
    expect = Translator.load(run_dir, "cpu", engine=engine).translate(
        [x.decode("utf-8", "replace").rstrip("\r") for x in raw.split(b"\n")], beam=4, max_len_b=4
    )
    assert out[:-1] == expect


def test_translate_streams_before_stdin_closes(run_dir):
    p = subprocess.Popen(
        [sys.executable, "-m", "aiayn", "translate", "-c", str(run_dir), "--beam", "2", *SEARCH],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for line in (b"Ein Hund rennt.\n", b"\n", b"Zwei M\xc3\xa4nner.\n"):
            p.stdin.write(line)
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], 90)
            assert ready, "no output while stdin is still open: not streaming"
            assert p.stdout.readline().endswith(b"\n")
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0


def test_translate_files_and_n_best(run_dir, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("\n".join(LINES[:3]) + "\nno newline at end", encoding="utf-8")
    out = tmp_path / "out.txt"
    r = aiayn("translate", "-c", str(run_dir), "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 0, r.stderr.decode()
    assert len(out.read_text(encoding="utf-8").split("\n")) == 5
    assert "4/4" in r.stderr.decode()  # file to file: a progress bar over the input's lines
    r = aiayn("translate", "-c", str(run_dir), "--input", str(src), *SEARCH)
    assert r.stdout.decode().count("\n") == 4 and "4/4" not in r.stderr.decode()
    r = aiayn("translate", "-c", str(run_dir), "--n-best", "2", "--beam", "3", *SEARCH, stdin=b"a\nb\n")
    rows = [row.split(" ||| ") for row in r.stdout.decode("utf-8").splitlines()]
    assert [row[0] for row in rows] == ["0", "0", "1", "1"]
    from aiayn import Translator

    # each line's two best hypotheses and their scores, as the API gives them, best first
    want = Translator.load(run_dir, "cpu").translate_scored(["a", "b"], beam=3, max_len_b=4, n_best=2)
    assert [row[1] for row in rows] == [text for nbest in want for text, _ in nbest]
    got_scores = [float(row[2]) for row in rows]
    assert got_scores == pytest.approx([s for nbest in want for _, s in nbest], abs=1e-4)
    assert got_scores[0] >= got_scores[1] and got_scores[2] >= got_scores[3]


def test_translate_document_decodes_sentences_and_keeps_the_layout(run_dir, tmp_path):
    """--document: the file is cut into sentences, each translated as it would be alone, and written back
    with the file's own whitespace; without it the same file is translated line by line."""
    from aiayn import Translator
    from aiayn.documents.segment import segment

    text = "Ein Hund rennt. Eine Frau fährt Fahrrad auf der Straße.\n\n  Zwei Männer spielen Fußball im Park.\n"
    text += "A dog runs.\n"
    src, out = tmp_path / "doc.de", tmp_path / "doc.en"
    src.write_text(text, encoding="utf-8")
    r = aiayn("translate", "-c", str(run_dir), "--document", "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 0, r.stderr.decode()
    seg = segment(text, "de")
    assert len(seg.sentences) == 4  # two on the first line
    t = Translator.load(run_dir, "cpu")
    alone = [t.translate([s], max_len_b=4)[0] for s in seg.sentences]
    assert out.read_text(encoding="utf-8") == seg.join(alone)
    assert seg.gaps == ["", " ", "\n\n  ", "\n", "\n"]
    r = aiayn("translate", "-c", str(run_dir), "--document", *SEARCH, stdin=text.encode())
    assert r.stdout.decode() == seg.join(alone)
    lines = aiayn("translate", "-c", str(run_dir), *SEARCH, stdin=text.encode()).stdout.decode()
    assert lines.split("\n")[0] == t.translate([text.split("\n")[0]], max_len_b=4)[0]  # line by line: one input
    r = aiayn("translate", "-c", str(run_dir), "--document", "--n-best", "2", stdin=b"x")
    assert r.returncode == 2 and b"--n-best" in r.stderr


def test_document_commands_cut_run_on_sentences_at_the_runs_sentence_starts(run_dir, tmp_path, monkeypatch):
    """`aiayn translate --document` and `aiayn serve` read the run's sentence starts from its
    data_report.json (aiayn.documents.segment, step 3): a caption without a final stop and the next one, on
    one line, are translated as two sentences."""
    import json
    import shutil

    import uvicorn

    from aiayn import Translator
    from aiayn.cli import main
    from aiayn.data.sentence_starts import SentenceStarts
    from aiayn.documents.segment import segment

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    learnt = {"words": ["Zwei"], "never_last": ["zu"]}
    (run / "data_report.json").write_text(json.dumps({"src_lang": "de", "sentence_starts": learnt}))
    text = "Ein Hund rennt über die Wiese Zwei Männer spielen Fußball im Park.\n"
    seg = segment(text, "de", starts=SentenceStarts(frozenset({"Zwei"}), frozenset({"zu"})))
    assert seg.sentences == ["Ein Hund rennt über die Wiese", "Zwei Männer spielen Fußball im Park."]
    t = Translator.load(run, "cpu")
    want = seg.join([t.translate([s], max_len_b=4)[0] for s in seg.sentences])
    whole = t.translate([text.strip()], max_len_b=4)[0] + "\n"
    assert want != whole  # else the assertions below could not tell the cut from the whole text
    r = aiayn("translate", "-c", str(run), "--document", *SEARCH, stdin=text.encode())
    assert r.returncode == 0 and r.stdout.decode() == want
    r = aiayn("translate", "-c", str(run), "--document", "--source-lang", "en", *SEARCH, stdin=text.encode())
    assert r.stdout.decode() == whole  # not the run's language
    r = aiayn("translate", "-c", str(run), "--document", "--no-run-on-cuts", *SEARCH, stdin=text.encode())
    assert r.stdout.decode() == whole  # punctuation only
    # HTML and Word documents too
    r = aiayn("translate", "-c", str(run), "--format", "html", *SEARCH, stdin=f"<p>{text.strip()}</p>".encode())
    assert r.stdout.decode() == f"<p>{want.strip()}</p>"
    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.add_paragraph(text.strip())
    d.save(str(tmp_path / "in.docx"))
    r = aiayn(
        "translate",
        "-c",
        str(run),
        "--input",
        str(tmp_path / "in.docx"),
        "--output",
        str(tmp_path / "out.docx"),
        *SEARCH,
    )
    assert r.returncode == 0 and docx.Document(str(tmp_path / "out.docx")).paragraphs[0].text == want.strip()
    served: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))  # the app, not a listening server
    assert main(["serve", "-c", str(run), "--engine", "torch", "--device", "cpu"]) == 0
    assert served[0].state.settings.sentence_starts == SentenceStarts(frozenset({"Zwei"}), frozenset({"zu"}))
    assert main(["serve", "-c", str(run), "--engine", "torch", "--device", "cpu", "--no-run-on-cuts"]) == 0
    assert not served[1].state.settings.sentence_starts


def test_translate_format_html(run_dir, tmp_path):
    from aiayn import Translator
    from aiayn.documents.html import translate_html

    page = '<!DOCTYPE html>\n<html lang="de"><body><p>Ein Hund <b>rennt</b>.</p><pre>Ein Hund.</pre></body></html>\n'
    src, out = tmp_path / "page.html", tmp_path / "page.en.html"
    src.write_text(page, encoding="utf-8")
    r = aiayn("translate", "-c", str(run_dir), "--format", "html", "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 0, r.stderr.decode()
    t = Translator.load(run_dir, "cpu")
    got = out.read_text(encoding="utf-8")
    assert got == translate_html(page, "de", lambda s: t.translate(s, max_len_b=4), t.align, target="en")
    # and on its own terms: the page's markup, the sentence translated whole, pre untouched
    from lxml import html as lxml_html

    root = lxml_html.document_fromstring(got)
    assert got.startswith("<!DOCTYPE html>") and [el.tag for el in root.iter()] == ["html", "body", "p", "b", "pre"]
    assert root.get("lang") == "en"  # the run's target language
    assert root.find("body/p").text_content() == t.translate(["Ein Hund rennt."], max_len_b=4)[0]
    assert root.find("body/pre").text == "Ein Hund."
    src.write_bytes(b"\xef\xbb\xbf" + page.encode("utf-8"))  # a byte-order mark is read, not translated
    r = aiayn("translate", "-c", str(run_dir), "--format", "html", "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 0 and out.read_text(encoding="utf-8") == got
    src.write_bytes("<p>Ein Hund rennt.</p>".encode("latin-1") + b"\xe4")
    r = aiayn("translate", "-c", str(run_dir), "--format", "html", "--input", str(src), *SEARCH)
    assert r.returncode != 0 and b"is not UTF-8 text (byte 22" in r.stderr


def test_translate_format_docx(run_dir, tmp_path):
    """--format docx: a Word document in, the same document translated out (as aiayn.documents.office makes
    it); what is not one is a one-line error."""
    docx = pytest.importorskip("docx")
    from aiayn import Translator
    from aiayn.documents.office import translate_office

    d = docx.Document()
    p = d.add_paragraph("Ein Hund ")
    p.add_run("rennt").italic = True
    p.add_run(".")
    src, out = tmp_path / "brief.docx", tmp_path / "brief.en.docx"
    d.save(str(src))
    r = aiayn("translate", "-c", str(run_dir), "--format", "docx", "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 0, r.stderr.decode()
    t = Translator.load(run_dir, "cpu")
    expected = translate_office(src.read_bytes(), "docx", "de", lambda s: t.translate(s, max_len_b=4), t.align, "en")
    assert out.read_bytes() == expected
    assert docx.Document(str(out)).paragraphs[0].text == t.translate(["Ein Hund rennt."], max_len_b=4)[0]
    named = tmp_path / "named.docx"  # no --format: the input's name says it is a Word document
    r = aiayn("translate", "-c", str(run_dir), "--input", str(src), "--output", str(named), *SEARCH)
    assert r.returncode == 0 and named.read_bytes() == expected
    pptx = pytest.importorskip("pptx")  # and a PowerPoint deck by its name (it was read as lines of text)
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = "Ein Hund rennt."
    src, out = tmp_path / "folien.pptx", tmp_path / "slides.pptx"
    deck.save(str(src))
    r = aiayn("translate", "-c", str(run_dir), "--input", str(src), "--output", str(out), *SEARCH)
    expected = translate_office(src.read_bytes(), "pptx", "de", lambda s: t.translate(s, max_len_b=4), t.align, "en")
    assert r.returncode == 0 and out.read_bytes() == expected
    r = aiayn("translate", "-c", str(run_dir), "--format", "docx", *SEARCH, stdin=b"Ein Hund rennt.")
    assert r.returncode == 2
    assert (
        r.stderr.decode().strip().splitlines()[-1]
        == "error: standard input: not a .docx (a zip archive): File is not a zip file"
    )


def _alone(run_dir: Path) -> tuple:
    """The run's translation of one sentence as it is alone (SEARCH's length), as text and as HTML text."""
    from aiayn import Translator

    t = Translator.load(run_dir, "cpu")

    def alone(sentence: str) -> str:
        return t.translate([sentence], max_len_b=4)[0]

    return alone, lambda sentence: html.escape(alone(sentence), quote=False)


def test_a_line_break_ends_a_sentence_through_the_cli(run_dir, tmp_path):
    """Issue #66: `--format html` and a .docx: a <br> and a Word line break (Shift+Enter) end a sentence,
    each line decoded as it is alone, the break kept between the translations."""
    docx = pytest.importorskip("docx")
    alone, escaped = _alone(run_dir)
    first, second = "Ein Hund im Park", "Am Strand spielen zwei Kinder."
    r = aiayn(
        "translate", "-c", str(run_dir), "--format", "html", *SEARCH, stdin=f"<p>{first}<br>{second}</p>".encode()
    )
    assert r.returncode == 0 and r.stdout.decode() == f"<p>{escaped(first)}<br>{escaped(second)}</p>"
    d = docx.Document()
    run = d.add_paragraph().add_run(first)
    run.add_break()  # Shift+Enter
    run.add_text(second)
    src, out = tmp_path / "zeilen.docx", tmp_path / "lines.docx"
    d.save(str(src))
    r = aiayn("translate", "-c", str(run_dir), "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 0 and docx.Document(str(out)).paragraphs[0].text == f"{alone(first)}\n{alone(second)}"


def test_list_markers_are_kept_through_the_cli(run_dir):
    """Issue #66: `--document` and `--format html`: a list marker at a line's start, or an <li>'s, is kept
    as it is and the rest of the line translated (sentencex cut "1." off as a sentence of its own)."""
    alone, escaped = _alone(run_dir)
    items = ["Ein Hund rennt.", "Zwei Männer spielen Fußball im Park."]
    r = aiayn("translate", "-c", str(run_dir), "--document", *SEARCH, stdin=f"1. {items[0]}\n2. {items[1]}\n".encode())
    assert r.returncode == 0 and r.stdout.decode() == f"1. {alone(items[0])}\n2. {alone(items[1])}\n"
    page = f"<ul><li>• {items[0]}</li><li>a) {items[1]}</li></ul>"
    r = aiayn("translate", "-c", str(run_dir), "--format", "html", *SEARCH, stdin=page.encode())
    assert (
        r.returncode == 0
        and r.stdout.decode() == f"<ul><li>• {escaped(items[0])}</li><li>a) {escaped(items[1])}</li></ul>"
    )


def test_documents_nested_past_the_parsers_depth_are_refused_through_the_cli(run_dir, tmp_path):
    """Issue #66: HTML or a .docx nested past libxml2's depth (256) is one line and exit status 2, nothing
    written, never a document translated without the text past that depth."""
    pytest.importorskip("docx")
    from nested_docs import DEEP_HTML, deep_docx

    r = aiayn("translate", "-c", str(run_dir), "--format", "html", *SEARCH, stdin=DEEP_HTML.encode())
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().strip().splitlines()[-1] == (
        "error: standard input: cannot read the HTML past line 1, column 519 (Excessive depth in document: 256): "
        "the text from there on would be lost"
    )
    src, out = tmp_path / "tief.docx", tmp_path / "deep.docx"
    src.write_bytes(deep_docx("Zwei Männer spielen Fußball im Park.", first="Ein Hund rennt."))
    r = aiayn("translate", "-c", str(run_dir), "--input", str(src), "--output", str(out), *SEARCH)
    assert r.returncode == 2 and not out.exists()
    error = r.stderr.decode().strip().splitlines()[-1]
    assert error.startswith(f"error: {src}: word/document.xml cannot be read past line 2, column ")
    assert error.endswith(" (Excessive depth in document: 256)")


def test_translate_bad_checkpoint_is_an_error(tmp_path):
    r = aiayn("translate", "-c", str(tmp_path / "nope"), stdin=b"x\n")
    assert r.returncode == 2
    assert r.stderr.decode().strip().splitlines() == [f"error: checkpoint not found: {tmp_path / 'nope'}"]


def test_search_defaults_come_from_the_runs_decode_section(run_dir, tmp_path):
    """A run whose config.yaml says beam 3 decodes with beam 3 when --beam is not given."""
    import argparse

    from aiayn.cli.translate import decode_config, register
    from aiayn.config import Config, DecodeConfig

    cfg = Config(model={"preset": "tiny"})
    cfg.decode.beam, cfg.decode.length_penalty = 3, 0.0
    cfg.save(run_dir / "config.yaml")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    try:
        a = parser.parse_args(["translate", "-c", str(run_dir)])
        assert decode_config(a) == DecodeConfig(beam=3, length_penalty=0.0, max_len_a=1.0, max_len_b=50)
        a = parser.parse_args(["translate", "-c", str(run_dir), "--beam", "5"])
        assert decode_config(a).beam == 5
    finally:
        (run_dir / "config.yaml").unlink()
    a = parser.parse_args(["translate", "-c", str(run_dir)])
    assert decode_config(a).beam == 4  # no config.yaml: the paper's defaults


def test_ensemble_on_the_command_line(run_dir, tmp_path):
    """`-c A B` decodes A and B together (same spm.model); a run with another spm.model is refused."""
    import shutil

    from aiayn import Translator

    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    shutil.copy(run_dir / "spm.model", other / "spm.model")
    torch.manual_seed(1)
    model = Transformer(
        ModelConfig.preset("tiny", vocab_size=Tokenizer(run_dir / "spm.model").vocab_size, max_positions=24)
    ).eval()
    save_weights(model, other / "checkpoints" / "step_00000007.safetensors", step=7)
    r = aiayn("translate", "-c", str(run_dir), str(other), "--beam", "3", *SEARCH, stdin="\n".join(LINES).encode())
    assert r.returncode == 0, r.stderr.decode()
    ens = Translator.load(run_dir, "cpu", ensemble=[other])
    assert ens.max_input_len == 24  # the smaller member bounds the input
    assert r.stdout.decode("utf-8").splitlines() == ens.translate(LINES, beam=3, max_len_b=4)

    Tokenizer.train(LINES * 20, other / "spm.model", vocab_size=300)
    r = aiayn("translate", "-c", str(run_dir), str(other), *SEARCH, stdin=b"x\n")
    assert r.returncode == 2 and "need the same spm.model" in r.stderr.decode()


def test_int8_api_and_translate_flag(run_dir):
    from aiayn import Translator
    from aiayn.model.int8 import is_int8

    t8 = Translator.load(run_dir, int8=True, engine="torch")  # no device: int8 means the CPU
    assert t8.device.type == "cpu" and is_int8(t8.model)
    assert not is_int8(Translator.load(run_dir, "cpu", engine="torch").model)
    expect = t8.translate(LINES[:3], beam=4, max_len_b=4)
    from aiayn.model.int8 import quantize_int8

    plain = Translator.load(run_dir, "cpu", engine="torch")
    by_hand = Translator(quantize_int8(plain.model), plain.tokenizer, "cpu", decode=plain.decode)  # quantized here
    assert expect == by_hand.translate(LINES[:3], beam=4, max_len_b=4) and all(expect)
    stdin = "\n".join(LINES[:3]).encode()
    r = aiayn("translate", "-c", str(run_dir), "--int8", "--engine", "torch", "--beam", "4", *SEARCH, stdin=stdin)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode("utf-8").split("\n")[:-1] == expect
    # The default engine: CTranslate2's int8 (compute_type int8) on an int8 export
    ct8 = Translator.load(run_dir, int8=True)
    assert ct8.engine == "ctranslate2" and ct8.searcher.compute_type == "int8"
    assert "int8" in (ct8.searcher.model_dir / "source.json").read_text()
    r = aiayn("translate", "-c", str(run_dir), "--int8", "--beam", "4", *SEARCH, stdin=stdin)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode("utf-8").split("\n")[:-1] == ct8.translate(LINES[:3], beam=4, max_len_b=4)


def test_evaluate_int8_flag(run_dir, tmp_path):
    import json

    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(LINES[:3]) + "\n", encoding="utf-8")
    ref.write_text("\n".join(LINES[3:]) + "\n", encoding="utf-8")
    out = tmp_path / "hyp.txt"
    r = aiayn(
        "evaluate",
        "-c",
        str(run_dir),
        "--src",
        str(src),
        "--ref",
        str(ref),
        "--int8",
        "--beam",
        "4",
        *SEARCH,
        "--output",
        str(out),
        "--json",
    )
    assert r.returncode == 0, r.stderr.decode()
    res = json.loads(r.stdout.decode().strip().splitlines()[-1])
    import sacrebleu

    hyps = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert res["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [LINES[3:]]).score)  # of what it wrote
    from aiayn import Translator

    assert out.read_text(encoding="utf-8").split("\n")[:-1] == Translator.load(run_dir, int8=True).translate(
        LINES[:3], beam=4, max_len_b=4
    )


@pytest.fixture
def greedy_run(run_dir, tmp_path, monkeypatch):
    """A copy of the run whose config.yaml says beam 1, length penalty 0, max_len_b 4; and the searches
    the Translator calls, recorded."""
    import shutil

    from aiayn.config import Config
    from aiayn.decode import engines as tr

    run = tmp_path / "greedy_run"
    shutil.copytree(run_dir, run)
    cfg = Config(model={"preset": "tiny"})
    cfg.decode.beam, cfg.decode.length_penalty, cfg.decode.max_len_b, cfg.decode.max_tokens = 1, 0.0, 4, 100
    cfg.save(run / "config.yaml")
    calls: list[tuple] = []
    greedy, beam = tr.greedy_search, tr.beam_search

    def spy_greedy(model, src, a, b, constraint):
        calls.append(("greedy", a, b))
        return greedy(model, src, a, b, constraint)

    def spy_beam(model, src, k, lp, a, b, n_best, patience, constraint):
        calls.append(("beam", k, lp, a, b))
        return beam(model, src, k, lp, a, b, n_best, patience, constraint)

    monkeypatch.setattr(tr, "greedy_search", spy_greedy)
    monkeypatch.setattr(tr, "beam_search", spy_beam)
    return run, cfg.decode, calls


def test_translator_load_decodes_with_the_runs_decode_section(greedy_run):
    """No keyword: the run's decode section (beam 1 = greedy, its max_len_b and max_tokens); keywords
    override one field per call; an explicit DecodeConfig replaces the run's."""
    from aiayn import Translator
    from aiayn.config import DecodeConfig

    run, decode, calls = greedy_run
    t = Translator.load(run, device="cpu", engine="torch")
    assert t.decode == decode and t.max_tokens == 100
    t.translate([LINES[0]])
    assert calls == [("greedy", 1.0, 4)]
    calls.clear()
    t.translate([LINES[0]], beam=3)
    assert calls == [("beam", 3, 0.0, 1.0, 4)]  # the rest still the run's
    calls.clear()
    t = Translator.load(run / "best.safetensors", device="cpu")  # a weights file in the run: the same
    assert t.decode == decode
    t = Translator.load(run, device="cpu", decode=DecodeConfig(beam=2, max_len_b=3), engine="torch")
    t.translate([LINES[0]])
    assert calls == [("beam", 2, 0.6, 1.0, 3)]


def test_translate_command_hands_the_resolved_config_to_the_translator(greedy_run, tmp_path):
    """`aiayn translate` without flags decodes greedily as the run's config.yaml says; flags override."""
    import argparse

    from aiayn.cli.translate import register

    run, _, calls = greedy_run
    src = tmp_path / "src.txt"
    src.write_text(LINES[0] + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    io = ["--input", str(src), "--output", str(tmp_path / "out.txt"), "--device", "cpu", "--engine", "torch"]
    a = parser.parse_args(["translate", "-c", str(run), *io])
    assert a.run(a) == 0
    assert calls == [("greedy", 1.0, 4)]
    calls.clear()
    a = parser.parse_args(["translate", "-c", str(run), *io, "--beam", "2", "--max-len-b", "3"])
    assert a.run(a) == 0
    assert calls == [("beam", 2, 0.0, 1.0, 3)]

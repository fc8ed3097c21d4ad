"""Compare two prepared caches: every encoded array byte for byte, and the sentencepiece models' pieces
and scores (and, with protobuf installed, the whole model apart from the temporary path older
versions stored in it).

    AIAYN_HOME=/tmp/old PYTHONPATH=<old checkout>/src aiayn data prepare --config configs/multi30k_de_en.yaml
    AIAYN_HOME=/tmp/new aiayn data prepare --config configs/multi30k_de_en.yaml
    python bench/data_identity.py /tmp/old/prepared/<key> /tmp/new/prepared/<key>
"""

from __future__ import annotations

import sys
from pathlib import Path

import sentencepiece as spm


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2
    old, new = Path(sys.argv[1]), Path(sys.argv[2])
    arrays = ("src", "src_offsets", "tgt", "tgt_offsets", "index")
    differ = [
        f"{s}.{k}"
        for s in ("train", "valid", "test")
        for k in arrays
        if (old / f"{s}.{k}.npy").read_bytes() != (new / f"{s}.{k}.npy").read_bytes()
    ]
    a, b = (spm.SentencePieceProcessor(model_file=str(d / "spm.model")) for d in (old, new))
    pieces = [[(m.id_to_piece(i), m.get_score(i)) for i in range(m.get_piece_size())] for m in (a, b)]
    print(f"arrays: {'identical' if not differ else 'DIFFER: ' + ', '.join(differ)}")
    print(f"pieces and scores: {'identical' if pieces[0] == pieces[1] else 'DIFFER'} ({len(pieces[0])} pieces)")
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError:
        print("whole model: not compared (pip install protobuf)")
    else:
        protos = []
        for d in (old, new):
            m = pb.ModelProto()
            m.ParseFromString((d / "spm.model").read_bytes())
            m.trainer_spec.model_prefix = ""  # older versions stored their temporary directory here
            protos.append(m.SerializeToString())
        print(f"whole model apart from model_prefix: {'identical' if protos[0] == protos[1] else 'DIFFERS'}")
    return 0 if not differ and pieces[0] == pieces[1] else 1


if __name__ == "__main__":
    raise SystemExit(main())

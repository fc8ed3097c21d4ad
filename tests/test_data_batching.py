"""Token-budget batching: budget, coverage, sharding, deterministic shuffle, exact resume, collate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data import Batch, BatchIterator, EncodedSplit


def make_split(src_lens: list[int], tgt_lens: list[int], seed: int = 0) -> EncodedSplit:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 500, n).tolist() for n in src_lens]
    tgt = [rng.integers(4, 500, n).tolist() for n in tgt_lens]
    return EncodedSplit.from_ids(src, tgt, vocab_size=500)


lengths = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=4, max_size=150)


def run_epoch(it: BatchIterator) -> list[Batch]:
    return list(it)


@settings(max_examples=40, deadline=None)
@given(
    pairs=lengths,
    max_tokens=st.integers(41, 400),
    world=st.integers(1, 4),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 3),
)
def test_budget_coverage_and_shards(pairs, max_tokens, world, seed, epoch):
    split = make_split([s for s, _ in pairs], [t for _, t in pairs])
    if len(split) < world:
        return
    seen, counts = [], []
    for rank in range(world):
        it = BatchIterator(split, max_tokens, seed=seed, rank=rank, world_size=world)
        it.set_epoch(epoch)
        try:
            n = len(it)
        except ValueError as e:  # only when even one example per batch cannot fill a multiple of world
            assert "equal batch counts" in str(e)
            one = _at(BatchIterator(split, max_tokens, seed=seed), epoch)
            assert -(-len(one) // world) * world > len(split)
            return
        batches = run_epoch(it)
        assert len(batches) == n
        counts.append(n)
        for b in batches:
            # padded source and padded target each within the budget (paper §5.1, counted separately)
            assert b.src.numel() <= max_tokens and b.tgt_in.numel() <= max_tokens
            assert b.src_tokens == int((b.src != PAD_ID).sum())
            assert b.tgt_tokens == int((b.tgt_out != PAD_ID).sum())
            seen.extend(b.ids.tolist())
    assert len(set(counts)) == 1  # equal batch counts per rank
    assert sorted(seen) == list(range(len(split)))  # disjoint and covering: each example exactly once


@settings(max_examples=30, deadline=None)
@given(pairs=lengths, max_tokens=st.integers(41, 300), seed=st.integers(0, 5), world=st.integers(1, 3), data=st.data())
def test_mid_epoch_resume_is_exact(pairs, max_tokens, seed, world, data):
    split = make_split([s for s, _ in pairs], [t for _, t in pairs])
    if len(split) < world:
        return
    rank = data.draw(st.integers(0, world - 1))

    def make():
        return BatchIterator(split, max_tokens, seed=seed, rank=rank, world_size=world)

    ref = make()
    ref.set_epoch(2)
    try:
        full = [b.ids.tolist() for b in ref]
    except ValueError:  # no equal shards possible (covered by the test above)
        return

    it = make()
    it.set_epoch(2)
    cut = data.draw(st.integers(0, len(it)))
    gen = iter(it)
    head = [next(gen).ids.tolist() for _ in range(cut)]
    state = it.state_dict()
    resumed = make()  # a fresh process: nothing but the state dict carries over
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])  # a trainer calling set_epoch after restore must not reset position
    tail = [b.ids.tolist() for b in resumed]
    assert head + tail == full  # exactly the batches the uninterrupted run produced
    assert resumed.epoch == 3 and resumed.position == 0


def test_resume_after_break_exact():
    split = make_split(list(range(1, 60)) * 3, list(range(2, 61)) * 3)
    ref = BatchIterator(split, 200, seed=7)
    expected = [b.ids.tolist() for b in ref]
    it = BatchIterator(split, 200, seed=7)
    got = []
    for i, b in enumerate(it):
        got.append(b.ids.tolist())
        if i == 4:
            break
    state = it.state_dict()
    assert state["position"] == 5 and state["epoch"] == 0
    again = BatchIterator(split, 200, seed=7)
    again.load_state_dict(state)
    got += [b.ids.tolist() for b in again]
    assert got == expected
    assert again.epoch == 1 and again.position == 0  # exhausted epoch moves on


def test_shuffle_is_deterministic_per_seed_and_epoch():
    split = make_split([5, 9, 12, 3, 7, 30, 2] * 20, [6, 8, 11, 4, 7, 25, 3] * 20)

    def order(seed, epoch):
        return [b.ids.tolist() for b in _at(BatchIterator(split, 120, seed=seed), epoch)]

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1)
    assert order(1, 0) != order(2, 0)
    unshuffled = [b.ids.tolist() for b in BatchIterator(split, 120, shuffle=False)]
    assert unshuffled == [b.ids.tolist() for b in _at(BatchIterator(split, 120, shuffle=False), 3)]


def _at(it: BatchIterator, epoch: int) -> BatchIterator:
    it.set_epoch(epoch)
    return it


def test_collate_layout():
    split = EncodedSplit.from_ids([[10, 11, 12], [20]], [[30, 31], [40, 41, 42, 43]], vocab_size=100)
    it = BatchIterator(split, 1000, shuffle=False)
    (b,) = list(it)
    order = b.ids.tolist()
    rows = {i: r for r, i in enumerate(order)}
    src, tgt_in, tgt_out = b.src.tolist(), b.tgt_in.tolist(), b.tgt_out.tolist()
    assert src[rows[0]] == [10, 11, 12, EOS_ID] and src[rows[1]] == [20, EOS_ID, PAD_ID, PAD_ID]
    assert tgt_in[rows[0]] == [BOS_ID, 30, 31, PAD_ID, PAD_ID] and tgt_out[rows[0]] == [30, 31, EOS_ID, PAD_ID, PAD_ID]
    assert tgt_in[rows[1]] == [BOS_ID, 40, 41, 42, 43] and tgt_out[rows[1]] == [40, 41, 42, 43, EOS_ID]
    assert b.src.dtype == torch.int64 and (b.src_tokens, b.tgt_tokens) == (6, 8)
    assert b.to("cpu").src.equal(b.src) and len(b) == 2


def test_length_bucketing_keeps_padding_low():
    rng = np.random.default_rng(0)
    sl = rng.integers(1, 60, 3000).tolist()
    split = make_split(sl, [max(1, s + int(d)) for s, d in zip(sl, rng.integers(-5, 6, 3000))])
    it = BatchIterator(split, 1000, seed=0)
    assert it.padding_fraction < 0.15  # random batching of these lengths pads about half
    padded = real = 0
    for b in it:
        padded += b.src.numel() + b.tgt_in.numel()
        real += b.src_tokens + b.tgt_tokens
    assert it.epoch == 1
    it.set_epoch(0)
    assert it.padding_fraction == pytest.approx(1 - real / padded)


def test_bad_arguments():
    split = make_split([3, 50], [3, 3])
    with pytest.raises(ValueError, match="smaller than the longest example"):
        BatchIterator(split, 40)
    with pytest.raises(ValueError, match="rank 2 outside world_size 2"):
        BatchIterator(split, 100, rank=2, world_size=2)
    it = BatchIterator(split, 100, seed=1)
    with pytest.raises(ValueError, match="seed was 2"):
        it.load_state_dict({**it.state_dict(), "seed": 2})


def _consume(
    split: EncodedSplit, world: int, state: dict | None, steps: int | None, max_tokens: int = 150, seed: int = 4
) -> tuple[list[list[int]], dict]:
    """`world` ranks in lockstep from `state`, one batch each per step, for `steps` steps (None: to the
    end of the epoch). Returns the epoch's example ids seen, per global batch, and rank 0's state."""
    its = [BatchIterator(split, max_tokens, seed=seed, rank=r, world_size=world) for r in range(world)]
    if state is not None:
        for it in its:
            it.load_state_dict(state)
    epoch = its[0].epoch
    gens = [iter(it) for it in its]
    seen: list[list[int]] = []
    while steps is None or len(seen) < steps * world:
        batches = [next(g, None) for g in gens]
        assert len({b is None for b in batches}) == 1  # equal shards: all ranks end together
        if batches[0] is None:
            break
        seen += [b.ids.tolist() for b in batches]
    assert all(it.epoch == epoch for it in its) or steps is None
    return seen, its[0].state_dict()


def test_resume_on_another_world_size_continues_the_epoch_without_repeats_or_gaps():
    rng = np.random.default_rng(1)
    sl = rng.integers(1, 40, 500).tolist()
    split = make_split(sl, [max(1, s + int(d)) for s, d in zip(sl, rng.integers(-4, 5, 500))])
    everything = list(range(len(split)))
    # 3 ranks for 4 steps, then 1 rank for 5 steps, then 2 ranks to the end of the epoch
    a, state = _consume(split, 3, None, 4)
    assert state["position"] == 4 and state["reshards"] == []
    b, state = _consume(split, 1, state, 5)
    assert state["world_size"] == 1 and state["reshards"] == [[3, 12]] and state["position"] == 5
    c, state = _consume(split, 2, state, None)
    ids = [i for batch in a + b + c for i in batch]
    assert sorted(ids) == everything  # each example exactly once in the epoch
    assert state["epoch"] == 1 and state["reshards"] == []  # the next epoch is 2 ranks' ordinary plan
    nxt, _ = _consume(split, 2, state, None)
    ordinary, _ = _consume(split, 2, {**state, "world_size": 2}, None)
    assert nxt == ordinary and sorted(i for batch in nxt for i in batch) == everything

    # a resharded epoch resumes exactly on the same world size, from a state in its middle
    start = _consume(split, 3, None, 4)[1]
    two, mid = _consume(split, 1, start, 2)
    three, again = _consume(split, 1, mid, 3)
    assert two + three == b and again == _consume(split, 1, start, 5)[1]
    assert _consume(split, 1, again, None)[0] == _consume(split, 1, _consume(split, 1, start, 5)[1], None)[0]

    # the same world size: exactly the old behaviour (no reshard entry, the same position)
    _, same = _consume(split, 2, _consume(split, 2, None, 3)[1], 0)
    assert same["position"] == 3 and same["reshards"] == []


def prefetch_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "aiayn-prefetch" and t.is_alive()]


@pytest.mark.parametrize("world,rank", [(1, 0), (3, 1)])
def test_prefetching_gives_the_same_batches_and_counts_only_those_handed_out(world, rank):
    """Collating ahead on a thread changes nothing the caller sees: the same batches, and after consuming
    k of them the same state as the plain iterator (not k + the batches collated ahead), so a state saved
    mid-epoch resumes exactly. Across epochs too, and from a restored position."""
    split = make_split(list(range(1, 60)) * 3, list(range(2, 61)) * 3)
    plain = BatchIterator(split, 200, seed=7, rank=rank, world_size=world)
    ahead = BatchIterator(split, 200, seed=7, rank=rank, world_size=world, prefetch=2)
    for epoch in range(2):
        gp, ga = iter(plain), iter(ahead)
        for k in range(len(plain)):
            bp, ba = next(gp), next(ga)
            for f in ("src", "tgt_in", "tgt_out", "ids"):
                assert torch.equal(getattr(bp, f), getattr(ba, f))
            assert (bp.src_tokens, bp.tgt_tokens) == (ba.src_tokens, ba.tgt_tokens)
            if k == 3:
                import time

                time.sleep(0.2)  # the thread has certainly collated its 2 batches ahead by now
            assert ahead.state_dict() == plain.state_dict()  # k + 1 consumed, epoch `epoch`
        for g in (gp, ga):
            with pytest.raises(StopIteration):
                next(g)
        assert ahead.state_dict() == plain.state_dict() and ahead.epoch == epoch + 1
    # resumed mid-epoch from a prefetching iterator's state: the rest of the epoch, exactly
    ga = iter(ahead)
    head = [next(ga).ids.tolist() for _ in range(4)]
    state = ahead.state_dict()
    ga.close()
    again = BatchIterator(split, 200, seed=7, rank=rank, world_size=world, prefetch=2)
    again.load_state_dict(state)
    ref = BatchIterator(split, 200, seed=7, rank=rank, world_size=world)
    ref.set_epoch(2)
    assert head + [b.ids.tolist() for b in again] == [b.ids.tolist() for b in ref]
    assert not prefetch_threads()


def test_prefetch_thread_stops_at_the_end_when_closed_and_on_errors(monkeypatch):
    """No thread outlives its epoch: exhausted, abandoned (generator closed, as the trainer does at the end
    of a run) or failed. A collate error reaches the consumer at the batch it concerns, the earlier
    batches first."""
    import aiayn.data.batching as batching

    split = make_split(list(range(1, 60)) * 3, list(range(2, 61)) * 3)
    it = BatchIterator(split, 200, seed=7, prefetch=2)
    list(it)
    assert not prefetch_threads()

    g = iter(it)
    next(g)
    assert prefetch_threads()  # it runs while the caller holds the epoch open ...
    g.close()
    assert not prefetch_threads()  # ... and stops, though its queue was full, when the caller lets go
    assert it.position == 1

    real, calls = batching.collate, [0]

    def failing(split, ids):
        calls[0] += 1
        if calls[0] == 4:
            raise ValueError("disk gone")
        return real(split, ids)

    monkeypatch.setattr(batching, "collate", failing)
    it = BatchIterator(split, 200, seed=7, prefetch=2)
    g = iter(it)
    got = [next(g) for _ in range(3)]
    with pytest.raises(ValueError, match="disk gone"):
        next(g)
    assert len(got) == 3 and it.position == 3  # the failed batch was not counted
    assert not prefetch_threads()


def test_an_abandoned_prefetching_iterator_does_not_hold_up_interpreter_exit():
    """A run that dies without closing its batches (an error outside the loop) still exits at once."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np
        from aiayn.data import BatchIterator, EncodedSplit
        rng = np.random.default_rng(0)
        split = EncodedSplit.from_ids([rng.integers(4, 500, n).tolist() for n in range(1, 200)],
                                      [rng.integers(4, 500, n).tolist() for n in range(1, 200)], vocab_size=500)
        g = iter(BatchIterator(split, 200, prefetch=2))
        next(g)
        G = g  # kept alive to the end: the thread is still blocked on its full queue
        raise SystemExit(3)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr


def test_pin_memory_is_applied_on_the_prefetch_thread(monkeypatch):
    """pin_memory=True (the trainer sets it on CUDA) hands out Batch.pin_memory() copies, made off the main
    thread; pinning itself needs CUDA, so here it is a stand-in that records its thread."""
    import threading

    split = make_split(list(range(1, 30)), list(range(2, 31)))
    where: list[str] = []

    def pin(self):
        where.append(threading.current_thread().name)
        return Batch(self.src.clone(), self.tgt_in, self.tgt_out, self.ids, self.src_tokens, -1)

    monkeypatch.setattr(Batch, "pin_memory", pin)
    got = list(BatchIterator(split, 200, seed=1, prefetch=2, pin_memory=True))
    assert got and all(b.tgt_tokens == -1 for b in got) and set(where) == {"aiayn-prefetch"}
    assert all(b.tgt_tokens != -1 for b in BatchIterator(split, 200, seed=1, prefetch=2))

"""tp_mlir.Session.generate on the decoders exported with their KV cache
(test/models/hf/with-past): the tokens of transformers' greedy generate(),
stored by test/models/hf/export_with_past.py, exactly; and its errors.

Run with the module on the path: PYTHONPATH=build/python pytest
python-bindings/tests (lit's Python/api.test does this).
"""
import os

import numpy as np
import pytest

import tp_mlir as tp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
WITH_PAST = os.path.join(ROOT, "test", "models", "hf", "with-past")


def load(model, name):
    return np.load(os.path.join(WITH_PAST, model, name + ".npy"))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2 with its cache on 2 ranks, up to 24 tokens of 2 sequences."""
    out = tmp_path_factory.mktemp("gpt2") / "gen.tpa"
    return tp.compile(os.path.join(WITH_PAST, "gpt2", "model.onnx"), 2,
                      max_seq=24, max_batch=2, output=out)


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_generate_matches_transformers(model, tmp_path):
    artifact = tp.compile(os.path.join(WITH_PAST, model, "model.onnx"), 2,
                          max_seq=24, max_batch=2, output=tmp_path / "g.tpa")
    session = tp.Session(artifact)
    greedy = load(model, "greedy")
    prompt = load(model, "input_ids")
    tokens = session.generate(prompt, greedy.shape[1] - prompt.shape[1],
                              attention_mask=load(model, "attention_mask"))
    assert tokens.dtype == np.int64
    np.testing.assert_array_equal(tokens, greedy)


def test_generate_runs_again_and_with_fewer_prompts(gpt2):
    """One session, many generations: the caches are reused, and a batch
    smaller than max_batch runs (the spare row is dropped)."""
    session = tp.Session(gpt2)
    greedy = load("gpt2", "greedy")
    prompt = load("gpt2", "input_ids")
    new = greedy.shape[1] - prompt.shape[1]
    # Row 0 has no padding: alone, it gives the same tokens.
    for _ in range(2):
        np.testing.assert_array_equal(session.generate(prompt[:1], new),
                                      greedy[:1])


def test_generate_stops_at_eos(gpt2):
    session = tp.Session(gpt2)
    greedy = load("gpt2", "greedy")
    prompt = load("gpt2", "input_ids")
    eos = int(greedy[0, prompt.shape[1] + 1])
    tokens = session.generate(prompt[:1], 6, eos_token_id=eos)
    stop = prompt.shape[1] + 1
    np.testing.assert_array_equal(tokens[0, :stop + 1], greedy[0, :stop + 1])
    assert (tokens[0, stop:] == eos).all()


def test_generate_errors(gpt2, tmp_path):
    session = tp.Session(gpt2)
    prompt = load("gpt2", "input_ids")
    with pytest.raises(tp.TPError, match="compiled for 24"):
        session.generate(prompt, 20)
    with pytest.raises(tp.TPError, match="decodes up to 2 at once"):
        session.generate(np.concatenate([prompt, prompt]), 2)
    with pytest.raises(tp.TPError, match=r"must be \[batch, length\]"):
        session.generate(prompt[0], 2)
    with pytest.raises(tp.TPError, match="attention_mask has shape"):
        session.generate(prompt, 2, attention_mask=prompt[:, :3])
    with pytest.raises(tp.TPError, match="outside the valid range"):
        session.generate(np.full((1, 3), 10**6, np.int64), 2)
    forward = tp.compile(os.path.join(ROOT, "test", "models", "gpt2",
                                      "model.onnx"), 1,
                         input_shapes={"input_ids": [2, 16]},
                         output=tmp_path / "f.tpa")
    with pytest.raises(tp.TPError, match="has no decode step"):
        tp.Session(forward).generate(prompt, 2)


def test_sampling_is_reproducible_across_rank_counts(gpt2, tmp_path):
    """The same seed gives the same tokens on 1 and 2 ranks; another seed,
    others."""
    one = tp.compile(os.path.join(WITH_PAST, "gpt2", "model.onnx"), 1,
                     max_seq=24, max_batch=2, output=tmp_path / "one.tpa")
    prompt = load("gpt2", "input_ids")
    mask = load("gpt2", "attention_mask")
    kwargs = dict(attention_mask=mask, do_sample=True, top_k=50, top_p=0.9,
                  temperature=0.8)
    a = tp.Session(gpt2).generate(prompt, 10, seed=7, **kwargs)
    b = tp.Session(one).generate(prompt, 10, seed=7, **kwargs)
    c = tp.Session(gpt2).generate(prompt, 10, seed=8, **kwargs)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:, :prompt.shape[1]], prompt)
    assert not np.array_equal(a, c)


def test_sampled_tokens_follow_the_softmax(gpt2):
    """One new token after a one-token prompt, drawn N times (seeds 0..N-1)
    from the 5 likeliest at temperature 2: each token's frequency is its
    softmax probability (the logits from one decode step, run directly)
    within 4 standard errors of a binomial, sqrt(p (1 - p) / N), plus 0.005
    for the float noise of the logits."""
    session = tp.Session(gpt2)
    token = load("gpt2", "input_ids")[:1, :1]
    mask = np.zeros((2, 24), np.int64)
    mask[:, 0] = 1
    logits = session.run({
        "input_ids": np.repeat(token, 2, axis=0),
        "attention_mask": mask,
        "position_ids": np.zeros((2, 1), np.int64),
        "cache_position": np.array(0, np.int64)})["logits"][0, 0]
    top = np.argsort(-logits, kind="stable")[:5]
    p = np.exp((logits[top] - logits[top[0]]) / 2.0)
    p /= p.sum()
    n = 1000
    drawn = [int(session.generate(token, 1, do_sample=True, top_k=5,
                                  temperature=2.0, seed=s)[0, 1])
             for s in range(n)]
    assert set(drawn) <= set(top.tolist())
    freq = np.array([drawn.count(int(t)) for t in top]) / n
    bound = 4 * np.sqrt(p * (1 - p) / n) + 0.005
    assert (np.abs(freq - p) <= bound).all(), (freq, p, bound)


def test_sampling_errors(gpt2):
    session = tp.Session(gpt2)
    prompt = load("gpt2", "input_ids")
    with pytest.raises(tp.TPError, match="temperature above 0"):
        session.generate(prompt, 2, do_sample=True, temperature=0.0)
    with pytest.raises(tp.TPError, match=r"top-p in \(0, 1\]"):
        session.generate(prompt, 2, do_sample=True, top_p=1.5)


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_beam_search_matches_transformers(model, tmp_path):
    """num_beams=4 over 2 prompts: 8 sequences, the artifact's max_batch."""
    artifact = tp.compile(os.path.join(WITH_PAST, model, "model.onnx"), 2,
                          max_seq=24, max_batch=8, output=tmp_path / "b.tpa")
    beams = load(model, "beam4")
    prompt = load(model, "input_ids")
    tokens = tp.Session(artifact).generate(
        prompt, beams.shape[1] - prompt.shape[1], num_beams=4,
        attention_mask=load(model, "attention_mask"))
    np.testing.assert_array_equal(tokens, beams)


def test_beam_search_needs_room(gpt2):
    with pytest.raises(tp.TPError, match="2 prompts x 4 beams"):
        tp.Session(gpt2).generate(load("gpt2", "input_ids"), 2, num_beams=4)


def test_generation_timings_add_up(gpt2):
    """A decode step's time splits into compute, communication and runtime,
    which add up to the time per token (by their definition, up to
    rounding: 1e-9 s)."""
    session = tp.Session(gpt2)
    assert session.generation_timings == {}
    session.generate(load("gpt2", "input_ids"), 6,
                     attention_mask=load("gpt2", "attention_mask"))
    t = session.generation_timings
    assert t["decode_steps"] == 5
    parts = (t["compute_seconds_per_token"] +
             t["communication_seconds_per_token"] +
             t["runtime_seconds_per_token"])
    assert abs(parts - t["seconds_per_token"]) < 1e-9
    assert t["compute_seconds_per_token"] > 0
    assert t["communication_seconds_per_token"] > 0  # 2 ranks: all-reduces

"""What a Megatron-style split of a `Features` architecture should give,
derived from its structure alone (never from the compiler's output):
the minimum collectives per forward pass and the share of the weights
one rank can hold.

Collectives (communicating ones; `all_slice`, a local slice, is free and
not counted), on t > 1 ranks:
  tensor parallel: one all-reduce per row-parallel block (attention and
    MLP: 2 per layer; a parallel-residual layer sums both before 1), plus
    1 for the vocabulary-parallel embedding. The logits of a causal LM stay
    split (each rank returns its block of the vocabulary); an encoder's
    last_hidden_state is whole on every rank: no gather.
  sequence parallel: each of those all-reduces becomes a reduce-scatter,
    and an all-gather restores the whole sequence before each
    column-parallel block (2 per layer, 1 for a parallel-residual layer,
    whose norms read the same input) and once more at the end: before the
    LM head, or for the encoder's output.
A Q or K norm over all heads' features (OLMo 2) adds one small all-reduce
of per-token partial sums for each of its means (`statistics`), counted
apart from the blocks' collectives.
A bottleneck's down and up projections (MobileBERT) contract the residual
stream through a norm: they stay replicated and need no collective; so
does the shared Q-K bottleneck (MobileBERT's, an elementwise NoNorm
between it and Q, K), whose split would end in Q and K instead of the
block's output projection; a
depthwise convolution over the sequence inside a block works on the
block's split channels and needs none either.

Weights: heads split as ceil(heads / t) per rank (padding included), K/V
heads by the heads each rank's query heads use, vocabularies as ceil(V /
t) rows, MLPs by 1/t; norms, row-parallel biases, position tables,
bottleneck projections and constant buffers are whole on every rank.
"""
import math

F32 = 4


def kv_heads_per_rank(f, t):
    """The most K/V heads one rank needs for its (padded) query heads."""
    if f.kv_heads % t == 0:
        return f.kv_heads // t
    per = math.ceil(f.heads / t)
    group = f.heads // f.kv_heads
    most = 0
    for rank in range(t):
        heads = [q for q in range(rank * per, (rank + 1) * per)
                 if q < f.heads]
        most = max(most, len({q // group for q in heads}))
    return most


def weights(f, t):
    """(bytes one rank holds, bytes of the whole model) by structure."""
    total = [0]
    local = [0.0]

    def add(count, share=1.0, size=F32):
        total[0] += count * size
        local[0] += count * size * share

    h, kv, d, width, hidden = (f.heads, f.kv_heads, f.head_dim, f.inner,
                               f.hidden)
    heads = math.ceil(h / t) / h
    kvs = kv_heads_per_rank(f, t) / kv
    vocab = math.ceil(f.vocab / t) / f.vocab
    bias = 1 if f.linear_bias else 0
    norm = 2 if f.norm in ("layernorm", "layernorm_manual") else 1
    qk_width = width // 2 if f.qk_bottleneck else width
    # K normed over all heads splits only where its heads divide (or are
    # padded alone); otherwise it may stay whole (statistics, below).
    ks = kvs if f.qk_norm != "full" or k_splits_through_norm(f, t) else 1.0
    for _ in range(1 if f.shared_layers else f.layers):
        add((qk_width + bias) * h * d, heads)       # q
        add((qk_width + bias) * kv * d, ks)         # k
        add((width + bias) * kv * d, kvs)           # v
        if f.qk_bottleneck:                         # whole, and its NoNorm
            add((width + bias) * qk_width + 2 * qk_width)
        add(h * d * width, heads)                   # o
        if not f.fused_out:                         # one bias for both
            add(bias * width)                       # o's bias
        if f.attn_conv:
            add(h * d * 4, heads)                   # depthwise 3 + bias
        if f.rel_attention == "disentangled" and (
                f.qkv != "separate" or kv != h or f.qk_bottleneck):
            add(2 * (width + bias) * h * d, heads)  # own pos q, k
        if f.qk_norm == "head":                     # whole, per head
            add(2 * norm * d)
        elif f.qk_norm == "full":                   # split with the heads
            add(norm * h * d, heads)
            add(norm * kv * d, ks)
        inputs = 2 if f.gated else 1
        add(inputs * (width + bias) * f.intermediate, 1 / t)
        add(f.intermediate * width, 1 / t)
        add(bias * width)
        if f.mlp_conv:
            add(f.intermediate * 4, 1 / t)
        norms = 1 if f.residual == "parallel" and f.parallel_norms == 1 \
            else 4 if f.norm_place == "sandwich" else 2
        add(norms * norm * width)
        if f.bottleneck:
            add((hidden + bias) * width + (width + bias) * hidden)
            add(norm * width)
            if f.norm_place == "post":
                add(norm * hidden)
    add(f.vocab * hidden, vocab)                    # word embedding
    if f.position == "learned":
        add((64 + 2) * hidden)
    elif f.position == "sinusoidal":
        add(64 * hidden)
    elif f.position == "relative":
        add(16 * h, heads)
    elif f.position == "rotary":
        add(f.rotary_dim // 2)
    if f.rel_attention == "disentangled":
        add(2 * 4 * width + norm * width)           # 2 * SPAN, their norm
    if f.kind == "decoder" and f.causal_mask == "buffer":
        add(64 * 64, size=1)                        # bool tril
    if f.embed_norm:
        add(norm * hidden)
    if f.norm_place in ("pre", "sandwich"):
        add(norm * hidden)
    if f.kind == "decoder":
        # A tied head is exported as a second, transposed initializer.
        add(f.vocab * hidden + (f.vocab if f.lm_bias else 0), vocab)
    return local[0], total[0]


def weight_fraction(f, t):
    local, total = weights(f, t)
    return local / total


def collectives(f, t, sp=False):
    """{kind: count} of the communicating collectives."""
    if t == 1:
        return {}
    per_layer = 1 if f.residual == "parallel" else 2
    blocks = f.layers * per_layer + 1
    if sp:
        return {"all_gather": f.layers * per_layer + 1,
                "reduce_scatter": blocks}
    return {"all_reduce": blocks}


def k_splits_through_norm(f, t):
    """True if K heads normed over all of K's features certainly split on
    t ranks: t divides them, or they are padded one by one (multi-head
    attention)."""
    return f.kv_heads % t == 0 or f.kv_heads == f.heads


def statistics(f, t):
    """The counts of all-reduces of per-token statistics a plan may have:
    a Q or K norm over all of the projection's features (OLMo 2) reduces
    over the heads that the ranks split, so each of its means (one for an
    RMS norm, two for a layer norm) is summed over the ranks."""
    if t == 1 or f.qk_norm != "full":
        return (0,)
    layer_norm = f.norm in ("layernorm", "layernorm_manual")
    means = 2 if layer_norm else 1
    # Heads that t does not divide are padded through the norm (zeros add
    # nothing to an RMS norm's sum of squares; a layer norm's variance
    # masks its centred values there). Grouped K/V heads are not repeated
    # through it (a sum over repeats would count each R times); they grow
    # by whole groups with padded query heads, or stay whole: either split
    # is exact, so either count is allowed.
    q = True
    k = k_splits_through_norm(f, t)
    grouped = not k and 1 < f.kv_heads < f.heads
    counts = {f.layers * (q + k) * means}
    if grouped:
        counts.add(f.layers * (q + 1) * means)
    return tuple(sorted(counts))


def split_outputs(f, t):
    """Outputs each rank returns its block of."""
    return ["logits"] if f.kind == "decoder" and t > 1 else []

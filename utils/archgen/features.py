"""The space of transformer architectures archgen samples: one `Features`
record per architecture, drawn from a seed.

Every field is a choice that some real model family makes (named in
SPACE); `sample(seed)` draws them with random.Random(seed), so a seed
names an architecture, and `Features.from_dict` rebuilds one from the JSON
a regression case stores (which keeps replaying the same model even after
the space has grown). No torch here: the driver and the expectations read
it too.
"""
import dataclasses
import math
import random

# name -> (choices, where real models do it). A choice list is sampled
# uniformly unless `sample` below says otherwise.
SPACE = {
    "kind": (["decoder", "encoder"],
             "causal LM with logits (GPT-2, Llama) / encoder with "
             "last_hidden_state (BERT)"),
    "layers": ([1, 2, 3], ""),
    "heads": ([2, 3, 4, 5, 6, 7], "3, 5, 6, 7 do not divide 4 ranks"),
    "head_dim": ([8, 12, 16], ""),
    "attention": (["mha", "gqa", "mqa"],
                  "Llama-2 7B / Llama-2 70B, Mistral / Falcon-7B, "
                  "GPTBigCode"),
    "qkv": (["separate", "fused", "interleaved", "conv1d", "kv_tail"],
            "Llama / Phi-3 [q|k|v] / GPT-NeoX per head, Falcon-40B per KV "
            "group / GPT-2 Conv1D / Falcon-7B K,V as the last 2 heads"),
    "bh_view": ([False, True],
                "attention on [batch*heads, seq, dim] views with bmm or "
                "baddbmm (BLOOM, GPT-NeoX)"),
    "scale": (["scores", "query"], "scores / sqrt(d) or q * d^-0.5 first"),
    "repeat_kv": (["expand", "repeat_interleave"],
                  "Llama's repeat_kv (expand + reshape) / "
                  "torch.repeat_interleave (only when pinned: torch 1.13 "
                  "exports it with dynamic axes as a graph onnxruntime "
                  "rejects)"),
    "causal_mask": (["buffer", "triu"],
                    "GPT-2's tril buffer sliced to the sequence / "
                    "torch.full(-inf).triu(1) per call"),
    "position": (["learned", "rotary", "alibi", "relative", "sinusoidal",
                  "none"],
                 "GPT-2, OPT / Llama, NeoX, GPT-J / BLOOM / T5 buckets / "
                 "the original transformer / none"),
    "position_ids": (["arange", "cumsum"],
                     "learned table read at arange(seq) (GPT-2) or at "
                     "cumsum(mask) (OPT)"),
    "rotary_pct": ([1.0, 0.5, 0.25], "partial rotary: NeoX 0.25, Phi 0.5"),
    "rotary_style": (["half", "interleaved"],
                     "rotate_half (NeoX, Llama) / pairs (GPT-J)"),
    "norm": (["layernorm", "layernorm_manual", "rms_rsqrt", "rms_div",
              "rms_gemma"],
             "nn.LayerNorm / mean-var by hand / Llama x*rsqrt*w / "
             "w*(x/sqrt) / Gemma x*rsqrt*(1+w)"),
    "norm_place": (["pre", "post", "sandwich"],
                   "GPT-2, Llama / BERT / Gemma 2, OLMo 2 (a norm before and "
                   "after each block, then the residual add)"),
    "mlp": (["gelu", "gelu_tanh", "relu", "swiglu", "geglu"],
            "BERT / GPT-2 gelu_new / OPT / Llama / Gemma"),
    "fused_gate": ([False, True], "SwiGLU/GeGLU gate and up in one "
                   "projection, chunked (Phi-3)"),
    "ffn_mult": ([2, 3, 4], "intermediate = mult * hidden"),
    "mlp_conv": ([False, True], "depthwise Conv1d over the sequence on "
                 "the MLP's intermediate (ConvBERT-like branch)"),
    "attn_conv": ([False, True], "depthwise Conv1d over the sequence on "
                  "the attention output, before its projection (Primer-"
                  "like)"),
    "residual": (["sequential", "parallel"], "GPT-2 / GPT-J, GPT-NeoX"),
    "parallel_norms": ([1, 2], "parallel residual with one shared norm "
                       "(GPT-J) or two (NeoX)"),
    "parallel_sum": (["residual_first", "blocks_first"],
                     "x + attn(x) + mlp(x) / attn + mlp + residual (GPT-J, "
                     "GPT-NeoX)"),
    "bottleneck": ([False, True], "MobileBERT: down projection + norm "
                   "before each layer, up projection after"),
    "vocab": ([97, 101, 250, 256, 333, 500, 512, 997, 1000, 1001, 1002,
               1003], "most do not divide 2 or 4"),
    "tied": ([True, False], "LM head is the embedding (GPT-2) or its own"),
    "lm_bias": ([False, True], "LM head bias (GPT-J)"),
    "linear_bias": ([True, False], "biases on projections"),
    "embed_norm": ([False, True], "norm after the embedding (BERT, BLOOM)"),
    "embed_scale": ([False, True], "embedding * sqrt(hidden) (Gemma)"),
    "logit_post": (["none", "scale", "div", "softcap"],
                   "logits as the head makes them / times a scale (Cohere's "
                   "logit_scale) / divided by one (Granite's logits_scaling) "
                   "/ tanh soft-capped (Gemma 2)"),
    "shared_layers": ([False, True], "one layer's weights applied at every "
                      "layer (ALBERT)"),
    "qk_bottleneck": ([False, True],
                      "Q and K read one narrower projection of the input "
                      "through an elementwise affine, V the input itself "
                      "(MobileBERT's shared key-query bottleneck and "
                      "NoNorm)"),
    "qk_norm": (["none", "head", "full"],
                "no norm on queries and keys / the model's norm over each "
                "head's features (Qwen3, Gemma 3; LayerNorm per head: "
                "Cohere, Persimmon, StableLM) / over all of the "
                "projection's features, across heads (OLMo 2, OLMoE)"),
    "rel_attention": (["none", "disentangled"],
                      "scores only from queries and keys / DeBERTa's "
                      "content-to-position and position-to-content terms: "
                      "q and k against projected relative-position "
                      "embeddings, picked per (query, key) by torch.gather "
                      "along the relative positions"),
    "init": (["redrawn", "fresh"],
             "every weight drawn / biases 0 and norm weights 1 as a model "
             "is initialised, which torch.onnx.export deduplicates: one "
             "initializer read by projections' biases and norms alike"),
    "fused_out": ([False, True],
                  "a parallel block's two output projections as one: the "
                  "attention's merged heads and the MLP's intermediate "
                  "concatenated before it (ViT-22B's and PaLM's fused "
                  "parallel layers)"),
    "opset": ([14, 15, 16, 17], "torch.onnx.export's opset"),
    "converted_opset": ([18, 19, 20, 21], "onnx.version_converter"),
}


@dataclasses.dataclass
class Features:
    kind: str = "decoder"
    layers: int = 2
    heads: int = 4
    head_dim: int = 16
    kv_heads: int = 4
    attention: str = "mha"
    qkv: str = "separate"
    bh_view: bool = False
    scale: str = "scores"
    repeat_kv: str = "expand"
    causal_mask: str = "triu"
    position: str = "learned"
    position_ids: str = "arange"
    rotary_pct: float = 1.0
    rotary_style: str = "half"
    norm: str = "layernorm"
    norm_place: str = "pre"
    mlp: str = "gelu"
    fused_gate: bool = False
    ffn_mult: int = 4
    mlp_conv: bool = False
    attn_conv: bool = False
    residual: str = "sequential"
    parallel_norms: int = 1
    parallel_sum: str = "residual_first"
    bottleneck: bool = False
    vocab: int = 1000
    tied: bool = True
    lm_bias: bool = False
    linear_bias: bool = True
    embed_norm: bool = False
    embed_scale: bool = False
    logit_post: str = "none"
    shared_layers: bool = False
    qk_bottleneck: bool = False
    qk_norm: str = "none"
    rel_attention: str = "none"
    init: str = "redrawn"
    fused_out: bool = False
    opset: int = 14
    converted_opset: int = 18

    # Derived sizes.
    @property
    def inner(self):
        """Width of attention and MLP: heads * head_dim."""
        return self.heads * self.head_dim

    @property
    def hidden(self):
        """Width of the residual stream (2x inner around a bottleneck)."""
        return 2 * self.inner if self.bottleneck else self.inner

    @property
    def intermediate(self):
        return self.ffn_mult * self.inner

    @property
    def rotary_dim(self):
        return max(2, int(self.head_dim * self.rotary_pct) // 2 * 2)

    @property
    def gated(self):
        return self.mlp in ("swiglu", "geglu")

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown features: {', '.join(sorted(unknown))}")
        return cls(**data)

    def describe(self):
        """One short line: the choices that differ from a plain GPT-2."""
        kv = f"/kv{self.kv_heads}" if self.kv_heads != self.heads else ""
        parts = [f"{self.kind} L{self.layers} h{self.heads}{kv}"
                 f"x{self.head_dim} H{self.hidden} V{self.vocab}",
                 f"qkv={self.qkv}"]
        if self.bh_view:
            parts.append("bh_view")
        if self.kv_heads != self.heads:
            parts.append(f"repeat_kv={self.repeat_kv}")
        pos = self.position
        if pos == "rotary":
            pos += f"({self.rotary_pct:g},{self.rotary_style})"
        elif pos == "learned":
            pos += f"({self.position_ids})"
        parts.append(f"pos={pos}")
        parts.append(f"norm={self.norm}/{self.norm_place}")
        mlp = self.mlp + ("(fused)" if self.gated and self.fused_gate else "")
        parts.append(f"mlp={mlp}x{self.ffn_mult}")
        if self.mlp_conv:
            parts.append("mlp_conv")
        if self.attn_conv:
            parts.append("attn_conv")
        if self.residual == "parallel":
            parts.append(f"parallel({self.parallel_norms} norm, "
                         f"{self.parallel_sum}"
                         f"{', fused_out' if self.fused_out else ''})")
        if self.bottleneck:
            parts.append("bottleneck")
        if self.kind == "decoder":
            parts.append(("tied" if self.tied else "untied") +
                         ("+bias" if self.lm_bias else ""))
            parts.append(f"mask={self.causal_mask}")
        if not self.linear_bias:
            parts.append("no_bias")
        if self.embed_norm:
            parts.append("embed_norm")
        if self.embed_scale:
            parts.append("embed_scale")
        if self.kind == "decoder" and self.logit_post != "none":
            parts.append(f"logits={self.logit_post}")
        if self.shared_layers:
            parts.append("shared_layers")
        if self.qk_bottleneck:
            parts.append("qk_bottleneck")
        if self.qk_norm != "none":
            parts.append(f"qk_norm={self.qk_norm}")
        if self.rel_attention != "none":
            parts.append(f"rel={self.rel_attention}")
        if self.init != "redrawn":
            parts.append(f"init={self.init}")
        parts.append(f"opset {self.opset}->{self.converted_opset}")
        return " ".join(parts)


def _coerce(name, text):
    """A --features value as the field's type."""
    field = next(f for f in dataclasses.fields(Features) if f.name == name)
    if field.type in (bool, "bool"):
        if text.lower() in ("1", "true", "yes"):
            return True
        if text.lower() in ("0", "false", "no"):
            return False
        raise ValueError(f"{name}: '{text}' is not a boolean")
    if field.type in (int, "int"):
        return int(text)
    if field.type in (float, "float"):
        return float(text)
    return text


def parse_overrides(items):
    """['qkv=fused', 'heads=5'] -> {'qkv': 'fused', 'heads': 5}."""
    names = {f.name for f in dataclasses.fields(Features)}
    fixed = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or name not in names:
            raise ValueError(f"bad --features '{item}' (known: "
                             f"{', '.join(sorted(names))})")
        fixed[name] = _coerce(name, value)
    return fixed


def sample(seed, fixed=None):
    """The architecture of `seed`; `fixed` pins some features (those a
    pinned value makes impossible are drawn among what remains)."""
    fixed = dict(fixed or {})
    rng = random.Random(seed)

    def pick(name, options=None, weights=None):
        # Always draw, so that pinning one feature leaves the others of the
        # seed as they were.
        options = options if options is not None else SPACE[name][0]
        value = rng.choices(options, weights=weights)[0]
        return fixed.get(name, value)

    f = Features()
    f.kind = pick("kind", weights=[3, 1])
    f.layers = pick("layers")
    f.bottleneck = pick("bottleneck", weights=[5, 1])
    f.heads = pick("heads")
    # hidden = heads * head_dim in [32, 96] (the inner width, around a
    # bottleneck, in [16, 48]).
    lo, hi = (16, 48) if f.bottleneck else (32, 96)
    dims = [d for d in SPACE["head_dim"][0] if lo <= f.heads * d <= hi] or \
        [8]
    f.head_dim = pick("head_dim", dims)
    f.attention = pick("attention", weights=[2, 1, 1])
    divisors = [k for k in range(2, f.heads) if f.heads % k == 0]
    if f.attention == "gqa" and not divisors:
        f.attention = "mqa" if f.heads < 4 else "mha"
    group = rng.choice(divisors or [1])
    kv = {"mha": f.heads, "mqa": 1, "gqa": group}[f.attention]
    f.kv_heads = fixed.get("kv_heads", kv)
    qkv_options = ["separate", "fused", "interleaved", "conv1d"]
    if f.kv_heads != f.heads:
        qkv_options.append("kv_tail")
    f.qkv = pick("qkv", qkv_options)
    f.bh_view = pick("bh_view", weights=[3, 1])
    f.scale = pick("scale")
    f.repeat_kv = pick("repeat_kv", weights=[1, 0])
    f.causal_mask = pick("causal_mask")
    positions = ["learned", "rotary", "alibi", "relative", "sinusoidal",
                 "none"]
    f.position = pick("position", positions, weights=[3, 4, 2, 2, 1, 1])
    f.position_ids = pick("position_ids", weights=[3, 1])
    f.rotary_pct = pick("rotary_pct", weights=[3, 1, 1])
    f.rotary_style = pick("rotary_style", weights=[2, 1])
    f.norm = pick("norm")
    f.norm_place = pick("norm_place", weights=[6, 2, 1]
                        if f.kind == "decoder" else [2, 4, 1])
    f.mlp = pick("mlp")
    f.fused_gate = pick("fused_gate")
    f.ffn_mult = pick("ffn_mult")
    f.mlp_conv = pick("mlp_conv", weights=[5, 1])
    f.attn_conv = pick("attn_conv", weights=[7, 1])
    f.residual = pick("residual", weights=[3, 1])
    f.parallel_norms = pick("parallel_norms")
    f.parallel_sum = pick("parallel_sum")
    f.vocab = pick("vocab")
    f.tied = pick("tied")
    f.lm_bias = pick("lm_bias", weights=[3, 1])
    f.linear_bias = pick("linear_bias", weights=[2, 1])
    f.embed_norm = pick("embed_norm", weights=[3, 1])
    f.embed_scale = pick("embed_scale", weights=[4, 1])
    f.opset = pick("opset")
    f.converted_opset = pick("converted_opset")
    # Drawn after the others, so that the seeds drawn before these existed
    # keep their other features.
    f.logit_post = pick("logit_post", weights=[4, 1, 1, 1])
    f.shared_layers = pick("shared_layers", weights=[5, 1])
    f.qk_bottleneck = pick("qk_bottleneck", weights=[5, 1])
    if f.qk_bottleneck and f.qkv != "separate":
        if "qk_bottleneck" in fixed and "qkv" not in fixed:
            f.qkv = "separate"
        else:
            f.qk_bottleneck = False
    f.qk_norm = pick("qk_norm", weights=[4, 1, 1])
    f.rel_attention = pick("rel_attention", weights=[4, 1])
    f.init = pick("init", weights=[4, 1])
    f.fused_out = pick("fused_out", weights=[2, 1])
    if f.fused_out and "fused_out" in fixed and "residual" not in fixed:
        f.residual = "parallel"
    # What real models never combine.
    if f.residual == "parallel" and f.norm_place != "pre" and \
            "norm_place" not in fixed:
        f.norm_place = "pre"
    if f.residual == "parallel" and f.norm_place != "pre" and \
            "residual" not in fixed:
        f.residual = "sequential"
    if f.residual != "parallel" and "fused_out" not in fixed:
        f.fused_out = False
    check(f)
    return f


def check(f):
    """Raise ValueError for a feature set that cannot be built."""
    for name, (choices, _) in SPACE.items():
        if name in ("heads", "head_dim", "vocab", "layers"):
            continue
        value = getattr(f, name)
        if value not in choices:
            raise ValueError(f"{name}={value!r} is not one of {choices}")
    if f.heads < 1 or f.head_dim < 2 or f.head_dim % 2 or f.layers < 1 or \
            f.vocab < 2:
        raise ValueError("heads, layers >= 1, vocab >= 2, head_dim even")
    if f.kv_heads < 1 or f.heads % f.kv_heads:
        raise ValueError(f"kv_heads={f.kv_heads} does not divide "
                         f"heads={f.heads}")
    if f.qkv == "kv_tail" and f.kv_heads == f.heads:
        raise ValueError("qkv=kv_tail needs fewer K/V heads than heads")
    if f.residual == "parallel" and f.norm_place != "pre":
        raise ValueError("a parallel residual is pre-norm")
    if f.fused_out and f.residual != "parallel":
        raise ValueError("fused_out fuses a parallel block's projections")
    if f.qk_bottleneck and f.qkv != "separate":
        raise ValueError("qk_bottleneck needs separate Q, K and V")
    if f.ffn_mult * f.inner % 4:
        raise ValueError("the intermediate size should divide by 4")
    return f


def alibi_slopes(heads):
    """BLOOM's slopes, for any head count."""
    closest = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != heads:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1)
                   for i in range(min(closest, heads - closest))]
    return slopes

import torch, sys
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, torchscript=True, use_cache=(len(sys.argv)<2))
m = GPT2LMHeadModel(cfg).eval()
ids = torch.randint(0, 256, (1, 16))
with torch.no_grad():
    t = torch.jit.trace(m, (ids,))
t.save(("models/gpt2_tiny_traced.pt" if len(sys.argv)<2 else "models/gpt2_tiny_nocache_traced.pt"))
print(type(t), [o.shape if hasattr(o,'shape') else type(o) for o in t(ids)][:3])

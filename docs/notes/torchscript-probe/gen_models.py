import torch, torch.nn as nn, torch.nn.functional as F, math, sys
torch.manual_seed(0)
out = sys.argv[1] if len(sys.argv) > 1 else "models"

class MLP(nn.Module):
    def __init__(s):
        super().__init__(); s.fc1 = nn.Linear(16, 32); s.act = nn.GELU(); s.fc2 = nn.Linear(32, 8)
    def forward(s, x):
        return s.fc2(s.act(s.fc1(x)))

class Ctrl(nn.Module):
    def __init__(s):
        super().__init__(); s.lin = nn.Linear(4, 4)
    def forward(s, x: torch.Tensor, n: int = 3) -> torch.Tensor:
        y = s.lin(x)
        if bool(y.sum() > 0):
            y = torch.relu(y)
        else:
            y = -y
        for i in range(n):
            y = y * 2
        return y

class Block(nn.Module):
    def __init__(s, d=32, h=4, t=8):
        super().__init__()
        s.h = h; s.d = d
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.ff1 = nn.Linear(d, 4 * d); s.ff2 = nn.Linear(4 * d, d)
        s.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t))
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(s.d, dim=2)
        q = q.view(B, T, s.h, C // s.h).transpose(1, 2)
        k = k.view(B, T, s.h, C // s.h).transpose(1, 2)
        v = v.view(B, T, s.h, C // s.h).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(C // s.h))
        att = att.masked_fill(s.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + s.proj(y)
        return x + s.ff2(F.gelu(s.ff1(s.ln2(x))))

m = MLP().eval(); torch.jit.trace(m, torch.randn(2, 16)).save(f"{out}/mlp_traced.pt")
torch.jit.script(Ctrl().eval()).save(f"{out}/ctrl_scripted.pt")
b = Block().eval(); torch.jit.trace(b, torch.randn(2, 8, 32)).save(f"{out}/block_traced.pt")
# also a module left in training mode, to test is_training()
torch.jit.trace(MLP(), torch.randn(2, 16)).save(f"{out}/mlp_traced_trainmode.pt")
# frozen from python for comparison
torch.jit.freeze(torch.jit.script(MLP().eval())).save(f"{out}/mlp_frozen_py.pt")
print("ok")

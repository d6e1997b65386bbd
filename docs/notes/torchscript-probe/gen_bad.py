import torch, torch.nn as nn, zipfile, os, io
d = "bad"
m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
open(f"{d}/random.bin", "wb").write(os.urandom(4096))
open(f"{d}/empty.pt", "wb").close()
try:
    torch.onnx.export(m, torch.randn(1, 4), f"{d}/model.onnx"); print("onnx ok")
except Exception as e:
    print("onnx export failed:", e)
torch.save(m.state_dict(), f"{d}/state_dict.pt")                     # zip, but data.pkl only (eager pickle)
torch.save(m, f"{d}/eager_module.pt")                                 # pickled nn.Module
torch.save(m.state_dict(), f"{d}/legacy_pickle.pt", _use_new_zipfile_serialization=False)
src = "models/mlp_traced.pt"
data = open(src, "rb").read(); open(f"{d}/truncated.pt", "wb").write(data[: len(data) // 2])
def rewrite(dst, edit):
    zin = zipfile.ZipFile(src)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for i in zin.infolist():
            b = zin.read(i.filename)
            b = edit(i.filename, b)
            if b is not None: zout.writestr(i.filename, b)
rewrite(f"{d}/version99.pt", lambda n, b: b"99\n" if n.endswith("/version") else b)
rewrite(f"{d}/unknown_op.pt", lambda n, b: b.replace(b"torch.gelu(", b"torch.scaled_dot_product_attention(") if n.endswith("activation.py") else b)
rewrite(f"{d}/no_version.pt", lambda n, b: None if n.endswith("version") else b)
# simulate a newer-producer file: extra records newer torch writes (byteorder) + version 10
rewrite(f"{d}/with_byteorder.pt", lambda n, b: b)
with zipfile.ZipFile(f"{d}/with_byteorder.pt", "a") as z: z.writestr("mlp_traced/byteorder", b"little")
print("ok")

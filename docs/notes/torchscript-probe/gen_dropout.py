import torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
torch.jit.trace(m.train(), torch.randn(3, 4), check_trace=False).save("models/dropout_bn_traced_train.pt")
torch.jit.trace(m.eval(), torch.randn(3, 4)).save("models/dropout_bn_traced_eval.pt")
torch.jit.script(m.train()).save("models/dropout_bn_scripted_train.pt")

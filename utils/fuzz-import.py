"""Mutation fuzzing of the ONNX importer: flips, deletes and inserts bytes in
the bundled models and checks that tp-translate only ever exits 0 or 1 (a
diagnostic), never crashes. Crashing inputs are saved as crash<N>.onnx.

Usage: python3 utils/fuzz-import.py SEED SECONDS [TP_TRANSLATE]
"""
import random, subprocess, sys, os, time
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
srcs = [os.path.join(root, 'test/models', m, 'model.onnx') for m in ('cnn', 'bert')]
tool = sys.argv[3] if len(sys.argv) > 3 else os.path.join(root, 'build/bin/tp-translate')
datas = [open(p,'rb').read() for p in srcs]
crashes = 0
t0 = time.time(); n = 0
while time.time() - t0 < float(sys.argv[2]) if len(sys.argv) > 2 else 120:
    d = bytearray(random.choice(datas))
    for _ in range(random.randint(1, 8)):
        i = random.randrange(len(d))
        op = random.random()
        if op < 0.6: d[i] = random.randrange(256)
        elif op < 0.8: del d[i:i+random.randint(1,64)]
        else: d[i:i] = bytes(random.randrange(256) for _ in range(random.randint(1,16)))
    p = 'fuzz-current.onnx'
    open(p,'wb').write(d)
    r = subprocess.run([tool,'--import-onnx',p,'-o','/dev/null','--input-shape','input_ids=2x16','--input-shape','attention_mask=2x16'],capture_output=True,timeout=60)
    n += 1
    if r.returncode not in (0, 1):
        crashes += 1
        open(f'crash{crashes}.onnx','wb').write(d)
        print('CRASH', r.returncode, r.stderr[-400:].decode('utf-8','replace'))
print('runs', n, 'crashes', crashes)

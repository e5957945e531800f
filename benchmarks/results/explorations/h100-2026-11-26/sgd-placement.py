import torch
T=18432
shapes=[(2048,2048),(512,2048),(512,2048),(2048,2048),(16384,2048),(2048,8192)]*16
P=[torch.randn(s,device='cuda',dtype=torch.bfloat16)*.02 for s in shapes]
X=torch.randn(T,16384,device='cuda',dtype=torch.bfloat16)
Y=torch.randn(T,16384,device='cuda',dtype=torch.bfloat16)
def gemm(s): return torch.mm(Y[:, :s[0]].t(), X[:, :s[1]])
def a():
  G=[gemm(s) for s in shapes]; torch._foreach_add_(P,G,alpha=-1e-6)
def b():
  for p,s in zip(P,shapes): p.add_(gemm(s),alpha=-1e-6)
def c():
  G=[gemm(s) for s in shapes]
def t(f,n=20):
  e=[torch.cuda.Event(enable_timing=True) for _ in range(2)];torch.cuda.synchronize();e[0].record()
  for _ in range(n): f()
  e[1].record();torch.cuda.synchronize();return e[0].elapsed_time(e[1])/n
for f in (a,b,c): f()
print(torch.cuda.get_device_name(), torch.__version__)
for r in range(8): print(r,'gemms+foreach %.2f ms'%t(a),'gemm+inline add %.2f ms'%t(b),'gemms alone %.2f ms'%t(c),flush=True)

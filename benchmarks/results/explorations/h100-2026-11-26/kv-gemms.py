import torch
T=18432;b=torch.bfloat16;D='cuda'
X=torch.randn(T,2048,device=D,dtype=b);W={n:torch.randn(o,2048,device=D,dtype=b) for n,o in (('q',2048),('k',512),('v',512))}
G={n:torch.randn(T,w.shape[0],device=D,dtype=b) for n,w in W.items()}
Wkv=torch.cat([W['k'],W['v']]);Gkv=torch.cat([G['k'],G['v']],1);Wqkv=torch.cat([W['q'],Wkv]);Gqkv=torch.cat([G['q'],Gkv],1)
def sep():
  [X@w.t() for w in W.values()];(G['q']@W['q']).add_(G['k']@W['k']).add_(G['v']@W['v']);[g.t()@X for g in G.values()]
def addmm():
  [X@w.t() for w in W.values()];torch.addmm(torch.addmm(G['q']@W['q'],G['k'],W['k']),G['v'],W['v']);[g.t()@X for g in G.values()]
def kv():
  X@W['q'].t();X@Wkv.t();torch.addmm(G['q']@W['q'],Gkv,Wkv);G['q'].t()@X;Gkv.t()@X
def qkv():
  X@Wqkv.t();Gqkv@Wqkv;Gqkv.t()@X
def t(f,n=100):
  e=[torch.cuda.Event(enable_timing=True) for _ in range(2)];torch.cuda.synchronize();e[0].record()
  for _ in range(n): f()
  e[1].record();torch.cuda.synchronize();return e[0].elapsed_time(e[1])/n
fs=dict(sep=sep,addmm=addmm,kv=kv,qkv=qkv)
for f in fs.values(): f()
import statistics as st
R={k:[] for k in fs}
for r in range(20):
  for k,f in fs.items(): R[k].append(t(f))
print(torch.cuda.get_device_name(),torch.__version__,"T=18432, 20 alternating rounds of 100 calls, ms per layer (median, min, max):")
for k,v in R.items(): print("%-6s %.3f %.3f %.3f"%(k,st.median(v),min(v),max(v)))

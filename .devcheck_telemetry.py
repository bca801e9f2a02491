import json,time,torch,pynvml
from fp4bench.measure.telemetry import *
from fp4bench.measure.kernels import *
print("torch",torch.__version__,"pynvml",getattr(pynvml,"__version__",None))
print(json.dumps(static_info(0)))
lib,_=load_nvml(); h=lib.nvmlDeviceGetHandleByIndex(0)
fv=lib.nvmlDeviceGetFieldValues(h,[74,76,251,252,253,269,270,271])
print("fields",[(f.fieldId,f.nvmlReturn,f.valueType,f.value.ullVal) for f in fv])
print("ids",field_ids(lib))
with TelemetrySampler(0,min_energy_window_s=1.0) as s: time.sleep(1.5)
print("idle",json.dumps(s.result.to_extra_info(1)))
a=torch.randn(8192,8192,device="cuda",dtype=torch.bfloat16);b=torch.randn_like(a)
for _ in range(5): a@b
torch.cuda.synchronize(); n=0
with TelemetrySampler(0) as s:
    t=time.perf_counter()
    while time.perf_counter()-t<4:
        for _ in range(50): a@b
        n+=50; torch.cuda.synchronize()
print("load",n,json.dumps(s.result.to_extra_info(n)))
tl=s.result; print("samples/s",tl.samples/tl.window_s)
def rs(): e=s.samples; print("first/last",e[0],e[-1])
rs()
x=torch.randn(4096,4096,device="cuda",dtype=torch.bfloat16)
cap=capture_kernels(lambda: x@x,repeats=3); print("mm",cap)
z=torch.empty(1<<20,device="cuda")
def f():
    z.zero_(); y=torch.zeros(1000,device="cuda"); w=z.clone(); return x@x
print("mix",capture_kernels(f,repeats=2))
kt=kernel_times(lambda: x@x,20)
e0=torch.cuda.Event(enable_timing=True);e1=torch.cuda.Event(enable_timing=True)
e0.record()
for _ in range(20): x@x
e1.record();torch.cuda.synchronize()
print("prof per call",kt.per_call_s,"events per call",e0.elapsed_time(e1)/20e3)
ev=None
from torch.profiler import profile,ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as p:
    with torch.profiler.record_function("myrange"): x@x
    torch.cuda.synchronize()
print([(e.name[:60],str(e.device_type),getattr(e,"activity_type","NA"),getattr(e,"is_user_annotation","NA")) for e in p.events()])
